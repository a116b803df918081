#!lua flags=allow-oom
-- Admit values to tiers of one shard without ever exceeding a tier's byte budget. The values
-- are not arguments: the caller SETs each under a staging key (expiring) in the same pipeline,
-- and this script renames the admitted ones to their keys and deletes the others, so the bytes
-- never pass through Lua. A staging key that is missing (Redis refused the SET) is refused.
-- Returns per item 1 (admitted), 0 (already cached) or -1 (no room, or not staged).
-- Augmented copies are admitted only while more than one job is live (a copy is never served
-- back to the job that made it), with that job marked as having used it.
-- KEYS: (key, staging key, augmented meta key or the key again) per item, then used, jobs
-- ARGV: n, job, overhead, the limit of each tier (in TIERS order), then the tier letter per item
local n = tonumber(ARGV[1])
local job = ARGV[2]
local overhead = tonumber(ARGV[3])
local limits = {}
for k, t in ipairs(TIERS) do limits[t] = tonumber(ARGV[3 + k]) end
local used, jobs = KEYS[3 * n + 1], KEYS[3 * n + 2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', jobs, now, '+inf')
local out = {}
for i = 1, n do
  local key, staged, meta = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local tier = ARGV[3 + #TIERS + i]
  local r
  if redis.call('EXISTS', key) == 1 then
    r = 0
  elseif redis.call('EXISTS', staged) == 0 then
    r = -1
  else
    local size = redis.call('STRLEN', staged) + overhead
    local cur = tonumber(redis.call('HGET', used, tier) or 0)
    if cur + size > limits[tier] or (tier == 'a' and live < 2) then
      r = -1
    else
      redis.call('RENAME', staged, key)
      redis.call('PERSIST', key)
      if tier == 'a' then
        redis.call('DEL', meta)  -- marks of an earlier copy do not carry over
        redis.call('HSET', meta, 'n', 1, 'j:' .. job, 1)
      end
      redis.call('HINCRBY', used, tier, size)
      r = 1
    end
  end
  redis.call('DEL', staged)
  out[i] = r
end
return out
