#!lua flags=allow-oom
-- Batch lookup for one shard, values not included: renew this job's lease, then for each sample
-- the first tier that holds it (its letter, '' for none) and the key to read its value from (the
-- caller reads them with one MGET right after). Replies the bytes used per tier (in TIERS order)
-- and the live jobs first.
-- An augmented copy is served at most once to each job; the lookup that makes every live job
-- have had it renames it to a 'taken' key (expiring after ARGV[6] ms) that only its caller
-- reads, and its bytes leave the augmented budget.
-- KEYS: (augmented, augmented meta, decoded, encoded) per sample, then used, jobs
-- ARGV: n, job, lease_ms, overhead, taken-key prefix (in this shard's hash tag), taken ttl ms
local n = tonumber(ARGV[1])
local job = ARGV[2]
local overhead = tonumber(ARGV[4])
local taken, ttl = ARGV[5], ARGV[6]
local used, jobs = KEYS[4 * n + 1], KEYS[4 * n + 2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', jobs, now + tonumber(ARGV[3]), job)
redis.call('ZREMRANGEBYSCORE', jobs, '-inf', now)
local live = redis.call('ZCARD', jobs)
local seen = 'j:' .. job
local out = {0, 0, 0, live}  -- used per tier, filled below
for i = 0, n - 1 do
  local a, m, d, e = KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]
  local tier, key = '', ''
  if redis.call('EXISTS', a) == 1 and redis.call('HEXISTS', m, seen) == 0 then
    tier, key = 'a', a
    redis.call('HSET', m, seen, 1)
    if redis.call('HINCRBY', m, 'n', 1) >= live then
      key = taken .. i
      redis.call('HINCRBY', used, 'a', -(redis.call('STRLEN', a) + overhead))
      redis.call('RENAME', a, key)
      redis.call('PEXPIRE', key, ttl)
      redis.call('DEL', m)
    end
  elseif redis.call('EXISTS', d) == 1 then
    tier, key = 'd', d
  elseif redis.call('EXISTS', e) == 1 then
    tier, key = 'e', e
  end
  out[#out + 1] = tier
  out[#out + 1] = key
end
local u = redis.call('HMGET', used, unpack(TIERS))
for k = 1, #TIERS do out[k] = tonumber(u[k] or 0) end
return out
