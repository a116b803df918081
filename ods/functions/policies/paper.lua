-- The 'paper' policy (the Seneca paper's): a hit increments the sample's reference count (one
-- byte per sample, K.ref); at the number of live jobs the sample is doomed (K.doom) and evicted
-- once no fetch of it is in flight. Misses are admitted only while there is room.
POLICY.paper = {
  -- an admission over a tier's budget is refused: no eviction
  evicts = false,
  -- a decision serves cached copies at random
  spends = false,
  -- a decision's hits were handed out: each one's count goes up; at the live jobs it is doomed
  served = function(hits)
    local live = #live_jobs()
    local args = {}
    for _, s in ipairs(hits) do
      args[#args + 1] = 'INCRBY'; args[#args + 1] = 'u8'; args[#args + 1] = '#' .. s
      args[#args + 1] = 1
    end
    local refs = chunked('BITFIELD', K.ref, {'OVERFLOW', 'SAT'}, args, 4)
    for m, s in ipairs(hits) do
      if refs[m] >= live then redis.call('SADD', K.doom, s) end
    end
  end,
  -- samples were admitted to tier t: their counts start at 0
  admitted = function(t, added)
    chunked('BITFIELD', K.ref, nil, field_sets(added, 'u8', {}), 4)
  end,
  -- a decision's hits were released: the doomed ones no other fetch pins are evicted
  released = function(hits, live)
    local cands = {}
    local doomed = chunked('SMISMEMBER', K.doom, nil, hits, 1)
    for k, s in ipairs(hits) do if doomed[k] == 1 then cands[#cands + 1] = s end end
    local pins = pinned_many(cands)
    for k, s in ipairs(cands) do
      if not pins[k] and redis.call('SREM', K.doom, s) == 1 then
        for _, t in ipairs(TIERS) do drop(s, t) end
        redis.call('BITFIELD', K.ref, 'SET', 'u8', '#' .. s, 0)
      end
    end
  end,
}
