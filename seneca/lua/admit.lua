-- Admit values to tiers of one shard without ever exceeding a tier's byte budget.
-- Returns per item 1 (admitted), 0 (already cached) or -1 (no room).
-- Augmented copies are admitted only while more than one job is live (a copy is never served
-- back to the job that made it), with that job marked as having used it.
-- KEYS: one per item, then used, jobs
-- ARGV: n, job, overhead, limit_e, limit_d, limit_a, then (tier 1|2|3, value) per item
local n = tonumber(ARGV[1])
local job = ARGV[2]
local overhead = tonumber(ARGV[3])
local limits = {tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])}
local fields = {'e', 'd', 'a'}
local used, jobs = KEYS[n + 1], KEYS[n + 2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', jobs, now, '+inf')
local out = {}
for i = 1, n do
  local key = KEYS[i]
  local tier = tonumber(ARGV[5 + 2 * i])
  local v = ARGV[6 + 2 * i]
  local size = #v + overhead
  local field = fields[tier]
  local cur = tonumber(redis.call('HGET', used, field) or 0)
  local r
  if redis.call('EXISTS', key) == 1 then
    r = 0
  elseif cur + size > limits[tier] or (tier == 3 and live < 2) then
    r = -1
  else
    if tier == 3 then
      redis.call('HSET', key, 'v', v, 'n', 1, 'j:' .. job, 1)
    else
      redis.call('SET', key, v)
    end
    redis.call('HINCRBY', used, field, size)
    r = 1
  end
  out[i] = r
end
return out
