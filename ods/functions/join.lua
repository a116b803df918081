-- join: register the job (or renew its lease). Arguments: lease (ms), samples of the job,
-- dataset size. Returns n, latest epoch (-1 before the first), served in it.
local lease, count = tonumber(args[a]), tonumber(args[a + 1])
redis.call('ZADD', K.jobs, now + lease, job)
local st = job_state()
if not st then
  redis.call('HSET', K.j, 'n', count, 'epoch', -1)
  st = {n = count, epoch = -1, served = 0}
end
return {st.n, st.epoch, st.served}
