-- admit: account values offered to the cache. Arguments: policy, capacity per tier (TIERS
-- order, units), seed, eviction rounds, candidates per round, then per sample: index, tier
-- letter, size (units). Under pressure ('seneca') an admission evicts the unpinned probed entry
-- live jobs need least, if they need it less than the new one. The caller writes the admitted
-- values and deletes the evicted ones. Returns per sample 1 (admitted), 2 (already cached in
-- that form), 3 (already cached as an encoded or decoded value of this size: the caller's
-- value replaces it, in case it went missing) or 0 (refused), and the {letter, sample} pairs
-- whose values the caller deletes (evicted now, or orphans collected).
local policy = args[a]
local cap = {}
for k, t in ipairs(TIERS) do cap[t] = tonumber(args[a + k]) end
local c = a + #TIERS + 1
math.randomseed(tonumber(args[c]))
local rounds, candidates = tonumber(args[c + 1]), tonumber(args[c + 2])
local live = live_declared()
if not live then return fail('SENECA_JOBS') end
collect()
local result = {}
for k = c + 3, #args, 3 do
  local s, t, size = tonumber(args[k]), args[k + 1], tonumber(args[k + 2])
  local tkey = K.t[t]
  local ok = 0
  if bit1(tkey, s) then
    ok = (VALUES and t ~= 'a' and size_of(t, s) == size) and 3 or 2
  else
    local used = tonumber(redis.call('HGET', K.used, F[t]) or '0')
    if used + size > cap[t] and policy ~= 'paper' then
      local want = demands({s}, t, live)[1]
      local nbits = redis.call('STRLEN', tkey) * 8
      for _ = 1, rounds do
        if used + size <= cap[t] or nbits == 0 then break end
        local cands = {}
        for _ = 1, candidates do
          local v = next_set(tkey, math.random(0, nbits - 1), nbits)
          if v ~= -1 then cands[#cands + 1] = v end
        end
        local pins, need = pinned_many(cands), demands(cands, t, live)
        local best, best_d = nil, nil
        for m, v in ipairs(cands) do
          if not pins[m] and (best_d == nil or need[m] < best_d) then best, best_d = v, need[m] end
        end
        if best == nil or best_d >= want then break end
        drop(best, t)
        used = tonumber(redis.call('HGET', K.used, F[t]) or '0')
      end
    end
    if used + size <= cap[t] then
      redis.call('SETBIT', tkey, s, 1)
      redis.call('HINCRBY', K.used, F[t], size)
      redis.call('HINCRBY', K.used, 'n' .. F[t], 1)
      if VALUES then redis.call('BITFIELD', K.sz[t], 'SET', 'u32', '#' .. str(s), size) end
      if t == 'a' then
        for _, j in ipairs(live) do
          if j.same then redis.call('SETBIT', j.g, s, 0) end  -- the view's jobs: a new copy
        end
        redis.call('SETBIT', K.g, s, 1)  -- the admitting job made this copy
      end
      if policy == 'paper' then redis.call('BITFIELD', K.ref, 'SET', 'u8', '#' .. s, 0) end
      ok = 1
    end
  end
  result[#result + 1] = ok
end
return {result, noted()}
