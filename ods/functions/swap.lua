-- swap: misses of a batch decided earlier that its maker has not started, for copies cached
-- since (a batch's misses decided as late as its worker makes them). Arguments: the batch's
-- epoch, lease (ms), seed, dataset size n, policy, spend copies first (0/1), jobs sampled for
-- demand, then the misses, in the order the caller would make them. As many of
-- them as C (the cached samples the job may use and has not been served) holds are replaced
-- by members of C, drawn as decide draws them (substitute.lua's from_cache: under a policy
-- that spends copies first, those the other live jobs need least); the first that many
-- misses go back to the job's unserved samples, no longer pending, to come in a later batch,
-- as misses displaced by a substitution do. The epoch's served count does not change. None
-- are swapped once every sample of the epoch has been served: the job's sampler has decided
-- its last batch, and a miss put back would never come.
-- Returns the hits (the k-th replaces the k-th miss), their tier letters, the pin bucket.
local e, lease, n = tonumber(args[a]), tonumber(args[a + 1]), tonumber(args[a + 3])
local policy = policy_of(args[a + 4])
local choose = chooser(policy.spends and args[a + 5] == '1', tonumber(args[a + 6]))
if not choose then return fail('SENECA_JOBS') end
math.randomseed(tonumber(args[a + 2]))
local misses = {}
for k = a + 7, #args do
  local i = tonumber(args[k])
  STR[i] = args[k]
  misses[#misses + 1] = i
end
local st = job_state(e)
if not st then return fail('SENECA_NOJOB', job) end
redis.call('ZADD', K.jobs, now + lease, job)
local bucket = math.floor(now / PIN_LEASE)
local U = rest_of(st.epoch, st.latest)
local left = st.n - st.served
if #misses == 0 or left <= 0 or not U or redis.call('EXISTS', U) == 0 then
  return {{}, {}, bucket}
end
local picked, tiers, _, exact = from_cache(U, #misses, n, left, {}, choose)
if #picked == 0 then return {{}, {}, bucket} end
if not exact then set_bits(U, picked, 0) end  -- the chosen leave U (exact: with a BITOP)
local out_tiers = serve(picked, tiers, policy, exact and K.xc or nil, n)
if exact then redis.call('DEL', K.xc) end
local back = {}
for k = 1, #picked do back[k] = misses[k] end
set_bits(U, back, 1)
clear_pending(back)
-- served once already as misses: counted as the hits they are now
redis.call('HINCRBY', K.used, 'served', -#back)
redis.call('HINCRBY', K.j, 'total', -#back)
redis.call('HINCRBY', K.used, 'subs', #picked)
return {picked, out_tiers, bucket}
