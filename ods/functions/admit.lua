-- admit: account values offered to the cache. Arguments: policy, capacity per tier (TIERS
-- order, units), seed, eviction candidates per offer, jobs sampled for demand, most
-- candidates per tier, the number of samples made from storage and not offered, those samples
-- (no longer pending, as the offered ones), then per sample: index, tier letter, size (units).
-- Under pressure, a policy that evicts (policies/seneca.lua) has an offer evict the unpinned
-- candidates live jobs need least (from a random window of the tier), while they are needed
-- less than the offered sample; demand is counted over a random sample of the live jobs,
-- each weighed by its pace (lib.lua's weighed). The caller writes the admitted values and
-- deletes the evicted ones. Returns per sample 1 (admitted), 2 (already cached in that form), 3
-- (already cached as an encoded or decoded value of this size: the caller's value replaces it,
-- in case it went missing) or 0 (refused), and the {letter, sample} pairs whose values the
-- caller deletes (evicted now, or orphans collected).
local policy = policy_of(args[a])
local cap = {}
for k, t in ipairs(TIERS) do cap[t] = tonumber(args[a + k]) end
local c = a + #TIERS + 1
math.randomseed(tonumber(args[c]))
local per_offer, most, pool_max = tonumber(args[c + 1]), tonumber(args[c + 2]), tonumber(args[c + 3])
local live = live_declared()
if not live then return fail('SENECA_JOBS') end
collect()
local S, T, Z, offered, by_tier = {}, {}, {}, {}, {}  -- offered[tier][sample]
for _, t in ipairs(TIERS) do offered[t], by_tier[t] = {}, {} end
local made = {}
for k = c + 5, c + 4 + tonumber(args[c + 4]) do made[#made + 1] = tonumber(args[k]) end
for k = c + 5 + #made, #args, 3 do
  local m, i, t = #S + 1, tonumber(args[k]), args[k + 1]
  S[m], T[m], Z[m] = i, t, tonumber(args[k + 2])
  STR[i] = args[k]  -- the sample's number as the caller wrote it: not formatted again
  if by_tier[t] then  -- (an unknown tier letter is left unanswered)
    offered[t][i] = true
    table.insert(by_tier[t], m)
  end
end
clear_pending(S)
clear_pending(made)
local result = {}
for _, t in ipairs(TIERS) do
  local list = by_tier[t]
  local samples = {}
  for k, m in ipairs(list) do samples[k] = S[m] end
  local rd = reads(samples)  -- (read in several bitmaps)
  local cached = bits(K.t[t], samples, rd)
  local used = tonumber(redis.call('HGET', K.used, F[t]) or '0')
  local pool, prepared, wants = nil, false, nil
  local added, sizes, now_in = {}, {}, {}  -- now_in: sample -> size admitted by this call
  local evicted, freed = {}, 0
  for k, m in ipairs(list) do
    local s, size = samples[k], Z[m]
    local have = now_in[s] or (cached[k] == 1 and (VALUES and t ~= TIER.augmented) and size_of(t, s))
    if now_in[s] or cached[k] == 1 then
      result[m] = (VALUES and t ~= TIER.augmented and have == size) and 3 or 2
    else
      if used + size > cap[t] and policy.evicts then
        if not prepared then
          prepared = true
          local jobs = weighed(demand_jobs(t, live, most))
          -- (an offered copy is new: a job that used an earlier copy of its sample may use it)
          wants = demands(samples, t, jobs, rd, true)
          pool = eviction_pool(t, math.min(per_offer * #list, pool_max), jobs)
        end
        while used + size > cap[t] do
          local cand = take(pool, wants[k])
          if not cand then break end
          if not offered[t][cand] then
            local units = size_of(t, cand)
            used, freed = used - units, freed + units
            evicted[#evicted + 1] = cand
          end
        end
      end
      result[m] = 0
      if used + size <= cap[t] then
        used = used + size
        added[#added + 1], sizes[#sizes + 1], now_in[s], result[m] = s, size, size, 1
      end
    end
  end
  drop_cached(t, evicted, freed)
  admitted(t, added, sizes, live, policy)
end
return {result, noted()}
