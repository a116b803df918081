-- lookup: where the job can read each of the given samples (no sampling: for loaders with
-- their own order). Arguments: lease (ms), policy, then the samples. The job's lease is renewed
-- and its hits served as decide serves them (pinned, augmented copies marked used). Returns
-- the tier letters ('' for storage) and the pin bucket.
local lease, policy = tonumber(args[a]), policy_of(args[a + 1])
redis.call('ZADD', K.jobs, now + lease, job)
local list = {}
for k = a + 2, #args do list[#list + 1] = tonumber(args[k]) end
local tiers = usable_tiers(list)
return {serve(list, tiers, policy), math.floor(now / PIN_LEASE)}
