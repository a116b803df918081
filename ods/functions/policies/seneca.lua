-- The 'seneca' policy (demand-aware, the default). Entries stay while there is room; under
-- pressure an admission evicts the probed entry with the least remaining demand (live jobs that
-- still need it this epoch: evict.lua), and only if that demand is lower than the new sample's;
-- a decision serves the copies other jobs need least first (substitute.lua).
-- An augmented copy is dropped once every live job of its view has used it.
POLICY.seneca = {
  -- an admission over a tier's budget evicts to make room
  evicts = true,
  -- a decision serves first the cached copies the other live jobs need least: those only this
  -- job needs are used up first, and leave room for copies more jobs need
  spends = true,
  -- a decision's hits were handed out (pinned already): nothing to count
  served = function(hits) end,
  -- samples were admitted to tier t: nothing to count
  admitted = function(t, added) end,
  -- a decision's hits were released (their fetch is done; live: the live jobs): the augmented
  -- copies among them that every live job of the view has used go, unless another fetch pins
  -- them
  released = function(hits, live)
    if redis.call('EXISTS', K.t[TIER.augmented]) == 0 then return end
    local cands = {}
    local cached = bits(K.t[TIER.augmented], hits)
    for k, s in ipairs(hits) do if cached[k] == 1 then cands[#cands + 1] = s end end
    local spent = aug_spent(cands, #cands > 0 and live or {})
    local pins = pinned_many(spent)
    for k, s in ipairs(spent) do
      if not pins[k] then drop(s, TIER.augmented) end
    end
  end,
}
