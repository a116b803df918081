-- release: unpin the hits of a decision (their fetch is done). Arguments: policy, the
-- decision's pin bucket, then its hit samples. The policy then drops what it drops at a release
-- (policies/). Returns the {letter, sample} pairs whose values the caller deletes (evicted now,
-- or orphans collected).
local policy, bucket = policy_of(args[a]), tonumber(args[a + 1])
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
if redis.call('EXISTS', K.pin1) == 1 then drop_if_empty(K.pin1) end
policy.released(hits, live)
return noted()
