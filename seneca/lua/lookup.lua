#!lua flags=allow-oom
-- Batch lookup for one shard: renew this job's lease, then for each sample return the first
-- tier that holds it (3 augmented, 2 decoded, 1 encoded, 0 none) and its value.
-- An augmented copy is served at most once to each job and deleted once every live job had it.
-- KEYS: (augmented, decoded, encoded) per sample, then used, jobs
-- ARGV: n, job, lease_ms, overhead
local n = tonumber(ARGV[1])
local job = ARGV[2]
local overhead = tonumber(ARGV[4])
local used, jobs = KEYS[3 * n + 1], KEYS[3 * n + 2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', jobs, now + tonumber(ARGV[3]), job)
redis.call('ZREMRANGEBYSCORE', jobs, '-inf', now)
local live = redis.call('ZCARD', jobs)
local seen = 'j:' .. job
local out = {0, 0, 0, live}
for i = 0, n - 1 do
  local a, d, e = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local tier, v = 0, false
  if redis.call('HEXISTS', a, seen) == 0 then
    v = redis.call('HGET', a, 'v')
  end
  if v then
    tier = 3
    redis.call('HSET', a, seen, 1)
    if redis.call('HINCRBY', a, 'n', 1) >= live then
      redis.call('DEL', a)
      redis.call('HINCRBY', used, 'a', -(#v + overhead))
    end
  else
    v = redis.call('GET', d)
    if v then
      tier = 2
    else
      v = redis.call('GET', e)
      if v then tier = 1 end
    end
  end
  out[#out + 1] = tier
  out[#out + 1] = v
end
local u = redis.call('HMGET', used, 'e', 'd', 'a')
out[1], out[2], out[3] = tonumber(u[1] or 0), tonumber(u[2] or 0), tonumber(u[3] or 0)
return out
