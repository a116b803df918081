-- decide: the next batch of the job's epoch. Arguments: batch, lease (ms), seed, dataset size
-- n, substitute (0/1), policy, epoch ('' for the latest). Misses are replaced by cached samples
-- the job has not seen (the displaced ones stay unserved); hits are pinned. Returns epoch,
-- served, substitutions, samples, tier letters ('' for storage), pin bucket.
local want, lease, n = tonumber(args[a]), tonumber(args[a + 1]), tonumber(args[a + 3])
local substitute, policy = args[a + 4] == '1', args[a + 5]
math.randomseed(tonumber(args[a + 2]))
local st = job_state(tonumber(args[a + 6] or ''))
if not st then return fail('SENECA_NOJOB', job) end
redis.call('ZADD', K.jobs, now + lease, job)
local bucket = math.floor(now / PIN_LEASE)
local U = rest_of(st.epoch, st.latest)
local left = st.n - st.served
if want > left then want = left end
if want <= 0 or not U or redis.call('EXISTS', U) == 0 then
  return {st.epoch, st.served, 0, {}, {}, bucket}
end
local taken = {}
if substitute then cached_unserved(U) end  -- C, in x:c: what the job may be served from cache
local picked, cleared = pick(U, want, n, left / n, taken, nil, true)
local tiers = substitute and tiers_in_c(picked) or usable_tiers(picked)
local misses = {}
for k = 1, #picked do
  if not tiers[k] then misses[#misses + 1] = k end
end
local subs, displaced = 0, {}
if substitute and #misses > 0 then
  local chosen, found = substitutes(#misses, n, taken)
  for m, s in ipairs(chosen) do
    displaced[m] = picked[misses[m]]
    picked[misses[m]] = s
    tiers[misses[m]] = found[m]
  end
  subs = #chosen
end
if substitute then redis.call('DEL', K.xc) end
-- one call: the served samples leave U, the displaced misses come back if pick cleared them
local bf, back = {}, cleared and displaced or {}
for k, i in ipairs(picked) do
  bf[4 * k - 3], bf[4 * k - 2], bf[4 * k - 1], bf[4 * k] = 'SET', 'u1', str(i), '0'
end
for k, i in ipairs(back) do
  local q = 4 * (#picked + k)
  bf[q - 3], bf[q - 2], bf[q - 1], bf[q] = 'SET', 'u1', str(i), '1'
end
chunked('BITFIELD', U, nil, bf, 4)
local out_tiers = serve(picked, tiers, policy)
redis.call('HINCRBY', K.j, 's' .. string.format('%d', st.epoch), #picked)
if subs > 0 then redis.call('HINCRBY', K.used, 'subs', subs) end
return {st.epoch, st.served + #picked, subs, picked, out_tiers, bucket}
