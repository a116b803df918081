-- claim: promised samples (decided as misses another job was making: decide.lua). Arguments:
-- policy, the count of the samples whose augmented copies the caller has read since, those
-- samples, then the samples it is still waiting for. Each copy read that is still cached and
-- that the job has not used is marked used by it and counted a hit, served and released at once
-- as the policy sees it (policies/: the copies every live job has used go). Returns the samples
-- claimed, those waited for that are still pending or admitted (another job is still making
-- them, or their values are being put in place: worth waiting for), and the {letter, sample}
-- pairs whose values the caller deletes.
local policy, count = policy_of(args[a]), tonumber(args[a + 1])
local live = live_declared()
if not live then return fail('SENECA_JOBS') end
collect()
local read, waiting = {}, {}
for k = a + 2, #args do
  local i = tonumber(args[k])
  STR[i] = args[k]
  if k < a + 2 + count then read[#read + 1] = i else waiting[#waiting + 1] = i end
end
local got = {}
if #read > 0 and redis.call('EXISTS', K.t[TIER.augmented]) == 1 then
  local cached = bits(K.t[TIER.augmented], read)
  local used = redis.call('EXISTS', K.g) == 1 and bits(K.g, read) or {}
  for k, s in ipairs(read) do
    if cached[k] == 1 and used[k] ~= 1 then got[#got + 1] = s end
  end
end
if #got > 0 then
  set_bits(K.g, got, 1)
  redis.call('HINCRBY', K.used, 'hits:' .. TIER.augmented, #got)
  redis.call('HINCRBY', K.j, 'hits', #got)
  policy.served(got)  -- a hit handed out, then released at once (its value is read already)
  policy.released(got, live)
end
-- still worth waiting for: pending, or admitted already for the job (its value is renamed into
-- place after the admission, so a read may just have missed it)
local still = {}
if #waiting > 0 then
  local busy = pending_of(pending_keys(), waiting)
  local cached = redis.call('EXISTS', K.t[TIER.augmented]) == 1 and bits(K.t[TIER.augmented], waiting) or {}
  local used = redis.call('EXISTS', K.g) == 1 and bits(K.g, waiting) or {}
  for k, s in ipairs(waiting) do
    if busy[k] or (cached[k] == 1 and used[k] ~= 1) then still[#still + 1] = s end
  end
end
return {got, still, noted()}
