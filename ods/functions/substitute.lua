-- Substitution helpers of decide (assembled after lib.lua; see ods/functions/__init__.py): C,
-- the cached samples a job may be served instead of its misses, and draws from it.

-- the samples of C = (encoded | decoded | (augmented & ~used by the job)) & U, from the bitmaps
-- that exist, in the scratch bitmap x:c (whole-bitmap operations: for small bitmaps)
local function cached_unserved(U)
  local parts = {}
  for _, t in ipairs({'e', 'd'}) do
    if redis.call('EXISTS', K.t[t]) == 1 then parts[#parts + 1] = K.t[t] end
  end
  if redis.call('EXISTS', K.t.a) == 1 then
    if redis.call('EXISTS', K.g) == 1 then
      -- a & ~g as a ^ (a & g): NOT g would end where g ends (a shorter g than a would hide
      -- every copy past its end)
      redis.call('BITOP', 'AND', K.xg, K.t.a, K.g)
      redis.call('BITOP', 'XOR', K.xg, K.xg, K.t.a)
    else
      redis.call('COPY', K.t.a, K.xg, 'REPLACE')
    end
    parts[#parts + 1] = K.xg
  end
  if #parts == 0 then
    redis.call('DEL', K.xc)
  elseif #parts == 1 then
    redis.call('BITOP', 'AND', K.xc, parts[1], U)
  else
    redis.call('BITOP', 'OR', K.xc, unpack(parts))
    redis.call('BITOP', 'AND', K.xc, K.xc, U)
  end
  redis.call('DEL', K.xg)
end

-- the tier the caller's job can use for each sample of list, all of them in U: only those set
-- in x:c (made by cached_unserved) are looked up in the tiers, the rest are misses
local function tiers_in_c(list)
  local inc, hits, where = bits(K.xc, list), {}, {}
  for k = 1, #list do
    if inc[k] == 1 then
      hits[#hits + 1] = list[k]
      where[#where + 1] = k
    end
  end
  local found, out = usable_tiers(hits), {}
  for m, k in ipairs(where) do out[k] = found[m] end
  return out
end

-- up to count samples of C (in x:c: cached, usable by the job, not served this epoch), none in
-- taken, and the tier of each. When C holds at most twice count samples (the usual case once
-- jobs share the cache: they drain what is cached for them), all of them are listed in one
-- ordered scan and count drawn from the list; else random probes.
local function substitutes(count, n, taken)
  local total = redis.call('BITCOUNT', K.xc)
  local chosen
  if total <= 2 * count then
    chosen = draw(listed(K.xc, n, taken), count, taken)
  else
    chosen = pick(K.xc, count, n, total / n, taken, nil, true)
  end
  return chosen, usable_tiers(chosen)
end
