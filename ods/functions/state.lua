-- state: entries and units held per tier (TIERS order; the augmented tier of the caller's
-- view), then the number of live jobs.
local live = live_jobs()
local out = {}
for _, t in ipairs(TIERS) do
  local v = redis.call('HMGET', K.used, 'n' .. F[t], F[t])
  out[#out + 1] = tonumber(v[1] or '0')
  out[#out + 1] = tonumber(v[2] or '0')
end
out[#out + 1] = #live
return out
