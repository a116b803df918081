-- release: unpin the hits of a decision (their fetch is done). Arguments: policy, the
-- decision's pin bucket, then its hit samples. 'paper' evicts doomed samples, 'seneca' drops
-- augmented copies every live job has used, unless pinned by another fetch. Returns the
-- {letter, sample} pairs whose values the caller deletes (evicted now, or orphans collected).
local policy, bucket = args[a], tonumber(args[a + 1])
local live = live_declared()
if not live then return fail('SENECA_JOBS') end
collect()
local hits = {}
for k = a + 2, #args do
  local i = tonumber(args[k])
  hits[#hits + 1], STR[i] = i, args[k]  -- as the caller wrote it: not formatted again
end
if #hits == 0 then return EVICTED end
local b = math.floor(now / PIN_LEASE)
if bucket == b then add_pins(K.pin, K.pinc, hits, -1)
elseif bucket == b - 1 then add_pins(K.pin1, K.pinc1, hits, -1) end  -- older pins lapsed
local cands = {}
if policy == 'paper' then
  local doomed = chunked('SMISMEMBER', K.doom, nil, hits, 1)
  for k, s in ipairs(hits) do if doomed[k] == 1 then cands[#cands + 1] = s end end
  local pins = pinned_many(cands)
  for k, s in ipairs(cands) do
    if not pins[k] and redis.call('SREM', K.doom, s) == 1 then
      for _, t in ipairs(TIERS) do drop(s, t) end
      redis.call('BITFIELD', K.ref, 'SET', 'u8', '#' .. s, 0)
    end
  end
elseif redis.call('EXISTS', K.t.a) == 1 then
  local cached = bits(K.t.a, hits)
  for k, s in ipairs(hits) do if cached[k] == 1 then cands[#cands + 1] = s end end
  local spent = aug_spent(cands, #cands > 0 and live or {})
  local pins = pinned_many(spent)
  for k, s in ipairs(spent) do
    if not pins[k] then drop(s, 'a') end
  end
end
return noted()
