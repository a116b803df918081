-- Admission helpers: demand estimates and eviction candidates (assembled after lib.lua; see
-- ods/functions/__init__.py).

-- the bytes [from, to] of key ('' where it has none)
local function range(key, from, to) return redis.call('GETRANGE', key, from, to) end

-- the width bytes of key from byte from on, wrapping past the end of a bitmap of len bytes, so
-- that every byte is as likely to open a window ('' or a short string where key has none)
local function window(key, from, width, len)
  local to = from + width - 1
  if to < len then return range(key, from, to) end
  local head = range(key, from, len - 1)
  return head .. string.rep('\0', len - from - #head) .. range(key, 0, to - len)
end

-- per bit position (1-8) of byte q, the jobs (their r and g bytes in rs, gs) that still need
-- the entry there, for the set bits of mask
local function byte_demand(q, mask, rs, gs, ws, need)
  local byte = string.byte
  for _, p in ipairs(BYTE_BITS[mask]) do need[p + 1] = 0 end
  for m = 1, #rs do
    local wanted = band(byte(rs[m], q) or 0, bnot(byte(gs[m], q) or 0), mask)
    for _, p in ipairs(BYTE_BITS[wanted]) do need[p + 1] = need[p + 1] + ws[m] end
  end
end

-- eviction candidates of tier t: the unpinned entries of a random window of its bitmap that
-- holds about count entries (wrapping past its end), with their demand over jobs (as demands
-- counts it). The window of each bitmap is read with one or two GETRANGEs; its bytes are
-- scanned as candidates are taken (take), from the window's random first byte on.
local function eviction_pool(t, count, jobs)
  local key = K.t[t]
  local len = redis.call('STRLEN', key)
  local entries = tonumber(redis.call('HGET', K.used, 'n' .. F[t]) or '0') or 0
  if len == 0 or entries <= 0 or count <= 0 then return nil end
  local width = math.min(len, math.ceil(count * len / entries))
  local from = math.random(0, len - 1)
  local function read(k) return window(k, from, width, len) end
  local P = {s = read(key), p0 = read(K.pin), p1 = read(K.pin1), rs = {}, gs = {}, from = from,
             len = len, q = 0, need = {}, by_need = {}, most = 0, ws = {}}
  for m, j in ipairs(jobs) do
    P.rs[m] = read(j.r)
    P.gs[m] = t == TIER.augmented and read(j.g) or ''
    P.ws[m] = j.w or 1
    P.most = P.most + P.ws[m]
  end
  for d = 0, P.most do P.by_need[d + 1] = {} end
  return P
end

-- scan the pool's window on to the next byte with unpinned entries and file them by demand;
-- false when the window is done
local function scan_on(P)
  local byte, s, p0, p1 = string.byte, P.s, P.p0, P.p1
  local q = P.q
  while q < #s do
    q = q + 1
    local free = band(byte(s, q), bnot(bor(byte(p0, q) or 0, byte(p1, q) or 0)))
    if free ~= 0 then
      P.q = q
      local need = P.need
      byte_demand(q, free, P.rs, P.gs, P.ws, need)
      local at = 8 * ((P.from + q - 1) % P.len)
      for _, p in ipairs(BYTE_BITS[free]) do
        local list = P.by_need[need[p + 1] + 1]
        list[#list + 1] = at + p
      end
      return true
    end
  end
  P.q = q
  return false
end

-- the pool's least needed candidate, if it is needed less than limit (nil: none), taken out
-- of the pool. Unneeded candidates are taken as soon as the scan finds them, others once the
-- whole window is scanned; equally needed ones in random order.
local function take(P, limit)
  if not P or limit <= 0 then return nil end
  local zero = P.by_need[1]
  while #zero == 0 and scan_on(P) do end
  for d = 0, math.min(P.most, limit - 1) do
    local list = P.by_need[d + 1]
    local count = #list
    if count > 0 then
      local m = math.random(1, count)
      local s = list[m]
      list[m] = list[count]  -- in two statements: Lua assigns a list in no set order
      list[count] = nil
      return s
    end
  end
  return nil
end

-- forget the entries of list (all cached in tier t, their sizes summing to units) in a few
-- calls, as drop does one by one (their values are the caller's to delete: EVICTED)
local function drop_cached(t, list, units)
  if #list == 0 then return end
  set_bits(K.t[t], list, 0)
  redis.call('HINCRBY', K.used, F[t], -units)
  redis.call('HINCRBY', K.used, 'n' .. F[t], -#list)
  for _, i in ipairs(list) do dropped(i, t) end
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
-- bitmap, budget and sizes, for the augmented tier the view's jobs' use of the new copies; then
-- the policy is told of them
local function admitted(t, added, sizes, live, policy)
  if #added == 0 then return end
  set_bits(K.t[t], added, 1)
  local total = 0
  for _, size in ipairs(sizes) do total = total + size end
  redis.call('HINCRBY', K.used, F[t], total)
  redis.call('HINCRBY', K.used, 'n' .. F[t], #added)
  if VALUES then chunked('BITFIELD', K.sz[t], nil, field_sets(added, 'u32', sizes), 4) end
  if t == TIER.augmented then
    for _, j in ipairs(live) do
      if j.same then set_bits(j.g, added, 0) end  -- the view's jobs: new copies
    end
    set_bits(K.g, added, 1)  -- the admitting job made them
  end
  policy.admitted(t, added)
end
