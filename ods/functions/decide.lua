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
local picked = pick_many(U, want, n, left / n, taken)
local tiers = usable_tiers(picked)
local misses = {}
for k = 1, #picked do
  if not tiers[k] then misses[#misses + 1] = k end
end
local subs, displaced = 0, {}
if substitute and #misses > 0 then
  -- C = (encoded | decoded | (augmented & ~used by job)) & U, from the bitmaps that exist
  local parts = {}
  for _, t in ipairs({'e', 'd'}) do
    if redis.call('EXISTS', K.t[t]) == 1 then parts[#parts + 1] = K.t[t] end
  end
  if redis.call('EXISTS', K.t.a) == 1 then
    if redis.call('EXISTS', K.g) == 1 then
      redis.call('BITOP', 'NOT', K.xg, K.g)
      redis.call('BITOP', 'AND', K.xg, K.xg, K.t.a)
    else
      redis.call('COPY', K.t.a, K.xg, 'REPLACE')
    end
    parts[#parts + 1] = K.xg
  end
  if #parts == 0 then
    redis.call('DEL', K.xc)
  elseif #parts == 1 then
    redis.call('BITOP', 'AND', K.xc, parts[1], U)
  else
    redis.call('BITOP', 'OR', K.xc, unpack(parts))
    redis.call('BITOP', 'AND', K.xc, K.xc, U)
  end
  redis.call('DEL', K.xg)
  local chosen = pick_many(K.xc, #misses, n, redis.call('BITCOUNT', K.xc) / n, taken)
  local found = usable_tiers(chosen)
  for m, s in ipairs(chosen) do
    displaced[m] = picked[misses[m]]
    picked[misses[m]] = s
    tiers[misses[m]] = found[m]
  end
  subs = #chosen
  redis.call('DEL', K.xc)
end
-- one call: the served samples leave U, the displaced misses stay (or come back) in it
local bf = {}
for _, i in ipairs(picked) do
  bf[#bf + 1] = 'SET'; bf[#bf + 1] = 'u1'; bf[#bf + 1] = str(i); bf[#bf + 1] = '0'
end
for _, i in ipairs(displaced) do
  bf[#bf + 1] = 'SET'; bf[#bf + 1] = 'u1'; bf[#bf + 1] = str(i); bf[#bf + 1] = '1'
end
chunked('BITFIELD', U, nil, bf, 4)
local out_tiers = serve(picked, tiers, policy)
redis.call('HINCRBY', K.j, 's' .. string.format('%d', st.epoch), #picked)
return {st.epoch, st.served + #picked, subs, picked, out_tiers, bucket}
