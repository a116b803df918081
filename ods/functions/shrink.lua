-- shrink: bring tiers that hold more than their budget back under it, as a split that gives
-- them less asks. Arguments: capacity per tier (TIERS order, units), seed, most entries
-- evicted per call, live jobs sampled for demand, candidates per entry to evict, most
-- candidates. Per tier over its budget, candidates are the unpinned entries of a random
-- window (as an admission under pressure takes them), the least needed first: a pinned entry (a fetch in flight) is never evicted, so a tier never
-- shrinks below what fetches in flight need. Returns the units each tier still holds above
-- its budget (TIERS order; the caller calls again while any is left) and the {letter,
-- sample} pairs whose values the caller deletes.
local cap = {}
for k, t in ipairs(TIERS) do cap[t] = tonumber(args[a + k - 1]) end
local c = a + #TIERS
math.randomseed(tonumber(args[c]))
local most, sampled = tonumber(args[c + 1]), tonumber(args[c + 2])
local per_entry, pool_max = tonumber(args[c + 3]), tonumber(args[c + 4])
local live = live_declared()
if not live then return fail('SENECA_JOBS') end
local over = {}
for _, t in ipairs(TIERS) do
  local h = redis.call('HMGET', K.used, F[t], 'n' .. F[t])
  local used, entries = tonumber(h[1] or '0'), tonumber(h[2] or '0')
  local evicted, freed = {}, 0
  if used > cap[t] and entries > 0 then
    local count = math.min(most, math.ceil((used - cap[t]) * entries / used))
    local pool = eviction_pool(t, math.min(per_entry * count, pool_max),
                               weighed(demand_jobs(t, live, sampled)))
    while used - freed > cap[t] and #evicted < most do
      local s = take(pool, math.huge)
      if not s then break end
      evicted[#evicted + 1], freed = s, freed + size_of(t, s)
    end
    drop_cached(t, evicted, freed)
  end
  over[#over + 1] = math.max(0, used - freed - cap[t])
end
return {over, noted()}
