-- Admission helpers: demand estimates and eviction candidates (assembled after lib.lua; see
-- ods/functions/__init__.py).

-- the live jobs whose demand counts in tier t (for the augmented tier, the caller's view's), at
-- most `most` of them at random: demand is estimated from a sample of the jobs, so that an
-- admission's work does not grow with their number
local function demand_jobs(t, live, most)
  local out = {}
  for _, j in ipairs(live) do
    if t ~= 'a' or j.same then out[#out + 1] = j end
  end
  for k = #out, 2, -1 do
    local m = math.random(1, k)
    out[k], out[m] = out[m], out[k]
  end
  for k = #out, most + 1, -1 do out[k] = nil end
  return out
end

-- the bytes [from, to] of key ('' where it has none)
local function range(key, from, to) return redis.call('GETRANGE', key, from, to) end

-- per bit position (1-8) of byte q, the jobs (their r and g bytes in rs, gs) that still need
-- the entry there, for the set bits of mask
local function byte_demand(q, mask, rs, gs, need)
  local byte = string.byte
  for _, p in ipairs(BYTE_BITS[mask]) do need[p + 1] = 0 end
  for m = 1, #rs do
    local wanted = band(byte(rs[m], q) or 0, bnot(byte(gs[m], q) or 0), mask)
    for _, p in ipairs(BYTE_BITS[wanted]) do need[p + 1] = need[p + 1] + 1 end
  end
end

-- eviction candidates of tier t: its entries not pinned in a random window of its bitmap that
-- holds about count entries, as {sample, demand} (demand over jobs, as demands counts it), the
-- least needed first (equally needed ones in random order). The window of each bitmap is read with one GETRANGE, so a candidate
-- costs a few operations here, not a command per job.
local function eviction_pool(t, count, jobs)
  local key = K.t[t]
  local len = redis.call('STRLEN', key)
  local entries = tonumber(redis.call('HGET', K.used, 'n' .. F[t]) or '0') or 0
  if len == 0 or entries <= 0 or count <= 0 then return {} end
  local width = math.min(len, math.ceil(count * len / entries))
  local from = math.random(0, len - width)
  local to = from + width - 1
  local s, p0, p1 = range(key, from, to), range(K.pin, from, to), range(K.pin1, from, to)
  local rs, gs = {}, {}
  for m, j in ipairs(jobs) do
    rs[m] = range(j.r, from, to)
    gs[m] = t == 'a' and range(j.g, from, to) or ''
  end
  local byte, need, by_need = string.byte, {}, {}  -- by_need[d + 1]: the candidates needed d
  for d = 0, #jobs do by_need[d + 1] = {} end
  for q = 1, #s do
    local free = band(byte(s, q), bnot(bor(byte(p0, q) or 0, byte(p1, q) or 0)))
    if free ~= 0 then
      byte_demand(q, free, rs, gs, need)
      for _, p in ipairs(BYTE_BITS[free]) do
        local list = by_need[need[p + 1] + 1]
        list[#list + 1] = {8 * (from + q - 1) + p, need[p + 1]}
      end
    end
  end
  local pool, random = {}, math.random
  for _, list in ipairs(by_need) do  -- equally needed ones in random order
    for k = #list, 1, -1 do
      local m = random(1, k)
      list[k], list[m] = list[m], list[k]
      pool[#pool + 1] = list[k]
    end
  end
  return pool
end

-- BITFIELD arguments setting the field of type kind of each sample of list to values[k] (0
-- where values has none)
local function field_sets(list, kind, values)
  local args = {}
  for k, s in ipairs(list) do
    args[4 * k - 3], args[4 * k - 2], args[4 * k - 1] = 'SET', kind, '#' .. str(s)
    args[4 * k] = values[k] or 0
  end
  return args
end

-- record the admissions of tier t (samples added, their sizes) in a few calls: the tier's
-- bitmap, budget and sizes, for the augmented tier the view's jobs' use of the new copies, and
-- the 'paper' policy's hit counts
local function admitted(t, added, sizes, live, policy)
  if #added == 0 then return end
  set_bits(K.t[t], added, 1)
  local total = 0
  for _, size in ipairs(sizes) do total = total + size end
  redis.call('HINCRBY', K.used, F[t], total)
  redis.call('HINCRBY', K.used, 'n' .. F[t], #added)
  if VALUES then chunked('BITFIELD', K.sz[t], nil, field_sets(added, 'u32', sizes), 4) end
  if t == 'a' then
    for _, j in ipairs(live) do
      if j.same then set_bits(j.g, added, 0) end  -- the view's jobs: new copies
    end
    set_bits(K.g, added, 1)  -- the admitting job made them
  end
  if policy == 'paper' then chunked('BITFIELD', K.ref, nil, field_sets(added, 'u8', {}), 4) end
end
