-- Bitmap helpers of the engine's functions (assembled first; see ods/functions/__init__.py).

local band, bor, bnot, rshift  -- the bit library is there only while a function runs: set by begin

-- a sample number as a string, as redis.call takes it (a number argument costs more). Formatted
-- once per call (STR is emptied by begin): a table of every number ever seen would grow with
-- the dataset, and its garbage collection stalls calls for tens of milliseconds at a million
-- samples.
local STR, format = {}, nil  -- format: string.format, set by begin (like band)
local function str(i)
  local v = STR[i]
  if not v then
    v = format('%d', i)
    STR[i] = v
  end
  return v
end

-- the set bits of each byte value, as positions most significant first (Redis's bit order),
-- and how many there are
local BYTE_BITS, BYTE_COUNT = {}, {}
for v = 0, 255 do
  local list, x = {}, v
  for p = 0, 7 do
    local w = 2 ^ (7 - p)
    if x >= w then
      list[#list + 1] = p
      x = x - w
    end
  end
  BYTE_BITS[v], BYTE_COUNT[v] = list, #list
end

-- Lua's unpack takes a few thousand values at most: commands whose arguments grow with a batch
-- are sent in chunks of at most CHUNK of them (a multiple of 2, 3 and 4: whole items)
local CHUNK = 960

-- about the cost of one operation over a whole bitmap, in BITFIELD items per sample of the
-- dataset (a BITOP over a million samples costs about as much as 30 items)
local WHOLE = 30 / 1000000

-- redis.call(cmd, key, pre..., args...) in chunks of whole items of width arguments; the
-- replies' elements concatenated (pre: nil or two arguments repeated before each chunk)
local function chunked(cmd, key, pre, args, width)
  local step = CHUNK - CHUNK % width
  if #args == 0 then return {} end
  if #args <= step then  -- one call: its reply as it is
    local reply
    if pre then
      reply = redis.call(cmd, key, pre[1], pre[2], unpack(args))
    else
      reply = redis.call(cmd, key, unpack(args))
    end
    return type(reply) == 'table' and reply or {}
  end
  local out = {}
  for first = 1, #args, step do
    local last = math.min(first + step - 1, #args)
    local reply
    if pre then
      reply = redis.call(cmd, key, pre[1], pre[2], unpack(args, first, last))
    else
      reply = redis.call(cmd, key, unpack(args, first, last))
    end
    if type(reply) == 'table' then
      for _, v in ipairs(reply) do out[#out + 1] = v end
    end
  end
  return out
end

local function bit1(key, i) return redis.call('GETBIT', key, i) == 1 end

-- BITFIELD arguments reading the bits of list
local function reads(list)
  local args = {}
  for k, i in ipairs(list) do
    args[3 * k - 2], args[3 * k - 1], args[3 * k] = 'GET', 'u1', str(i)
  end
  return args
end

-- bit i of key for every i in list (0/1 each): a bitmap up to 32 bytes per position asked is
-- read whole and tested here, a larger one with one BITFIELD_RO call (args: reads(list), when
-- the caller reads the list in several bitmaps)
local function bits(key, list, args)
  if #list == 0 then return {} end
  if redis.call('STRLEN', key) <= 32 * #list then
    local s, out = redis.call('GET', key), {}
    local byte, floor = string.byte, math.floor
    for k, i in ipairs(list) do
      local b = s and byte(s, floor(i / 8) + 1)
      out[k] = b and band(rshift(b, 7 - i % 8), 1) or 0
    end
    return out
  end
  return chunked('BITFIELD_RO', key, nil, args or reads(list), 3)
end

-- one BITFIELD call: set bit i of key to v for every i in list; answers the previous bits
local function set_bits(key, list, v)
  if #list == 0 then return {} end
  local args, value = {}, str(v)
  for k, i in ipairs(list) do
    args[4 * k - 3], args[4 * k - 2], args[4 * k - 1], args[4 * k] = 'SET', 'u1', str(i), value
  end
  return chunked('BITFIELD', key, nil, args, 4)
end

-- first set bit of key at or after position r, wrapping; -1 when none in [0, n)
local function next_set(key, r, n)
  local p = redis.call('BITPOS', key, 1, r, n - 1, 'BIT')
  if p == -1 and r > 0 then p = redis.call('BITPOS', key, 1, 0, r - 1, 'BIT') end
  return p
end

-- every set bit of key in [0, n) not in taken, in order, up to most of them (nil: all): one
-- BITPOS per bit, each scanning on from the last (a sparse key costs about one call per set
-- bit and one pass over its bytes)
local function listed(key, n, taken, most)
  local out, last = {}, str(n - 1)
  most = most or math.huge
  local p = redis.call('BITPOS', key, 1, 0, last, 'BIT')
  while p ~= -1 do
    if not taken[p] then out[#out + 1] = p end
    if p >= n - 1 or #out >= most then break end
    p = redis.call('BITPOS', key, 1, str(p + 1), last, 'BIT')
  end
  return out
end

-- up to count of list at random (a partial Fisher-Yates shuffle), added to taken
local function draw(list, count, taken)
  local out, random = {}, math.random
  for k = 1, math.min(count, #list) do
    local j = random(k, #list)
    list[k], list[j] = list[j], list[k]
    taken[list[k]] = true
    out[k] = list[k]
  end
  return out
end

-- one of the set bits of the 32-bit word v (word w of a bitmap) at random; nil when that bit
-- is at or past n or in taken (the probe finds nothing)
local function bit_in_word(v, w, n, taken)
  local floor, count = math.floor, BYTE_COUNT
  local b4 = v % 256
  v = floor(v / 256)
  local b3 = v % 256
  v = floor(v / 256)
  local b2, b1 = v % 256, floor(v / 256)
  local c1, c2, c3 = count[b1], count[b2], count[b3]
  local r = math.random(1, c1 + c2 + c3 + count[b4])
  local b, base = b1, w * 32
  if r > c1 then
    r, b, base = r - c1, b2, base + 8
    if r > c2 then
      r, b, base = r - c2, b3, base + 8
      if r > c3 then r, b, base = r - c3, b4, base + 8 end
    end
  end
  local i = base + BYTE_BITS[b][r]
  if i < n and not taken[i] then return i end
  return nil
end

-- a bitmap this dense is probed by whole random words (one BITFIELD call for many probes; a
-- word then holds a set bit 64% of the time or more), a sparser one with BITPOS
local DENSE = 1 / 32
-- ... and one this dense by random single bits: a probe finds a set bit half the time or more,
-- and the number it formats is the one the caller writes next (a word costs a number that is
-- not used again and a pick among its bits)
local DENSER = 1 / 2

-- up to count distinct set bits of key in [0, n) not in taken, each drawn uniformly, from m
-- random single-bit probes in one BITFIELD call (taken gains them). clear: the probes clear the
-- bits they find (SET to 0 answers the old bit), so the caller need not clear the ones kept;
-- found bits not kept and not taken are set again
local function probe_bits(key, m, count, n, taken, out, clear)
  local at, args, random, width = {}, {}, math.random, clear and 4 or 3
  for k = 1, m do
    local i = random(0, n - 1)
    at[k] = i
    if clear then
      args[4 * k - 3], args[4 * k - 2], args[4 * k - 1], args[4 * k] = 'SET', 'u1', str(i), '0'
    else
      args[3 * k - 2], args[3 * k - 1], args[3 * k] = 'GET', 'u1', str(i)
    end
  end
  local got = chunked(clear and 'BITFIELD' or 'BITFIELD_RO', key, nil, args, width)
  local back = {}
  for k = 1, m do
    local i = at[k]
    if got[k] == 1 and not taken[i] then
      if #out < count then
        taken[i] = true
        out[#out + 1] = i
      elseif clear then
        back[#back + 1] = i
      end
    end
  end
  set_bits(key, back, 1)
end

-- up to count distinct set bits of key in [0, n) not in taken, one from each of m random
-- 32-bit words read in one BITFIELD call (taken gains them)
local function probe_words(key, m, count, n, taken, out)
  local ws, args, random, floor = {}, {}, math.random, math.floor
  for k = 1, m do
    local w = floor(random(0, n - 1) / 32)  -- the last, partial word less often
    ws[k] = w
    args[3 * k - 2], args[3 * k - 1], args[3 * k] = 'GET', 'u32', str(32 * w)
  end
  local got = chunked('BITFIELD_RO', key, nil, args, 3)
  for k = 1, m do
    if #out >= count then break end
    local i = got[k] ~= 0 and bit_in_word(got[k], ws[k], n, taken)
    if i then
      taken[i] = true
      out[#out + 1] = i
    end
  end
end

-- up to count distinct set bits of key in [0, n), at random, not in taken (which gains them),
-- in at most budget probes (nil: until count are found or the key has no more). density:
-- about the share of [0, n) set. While it is at least DENSE, random 32-bit words are read in
-- one call per round and one set bit taken from each (from DENSER on, random single bits);
-- then (or below DENSE) the next set bit after a random position, per probe; a probe that
-- finds taken bits moves on a few times, then gives up. clear: the bits returned are cleared
-- in key, and so may be taken bits found (the caller does not want them); single-bit probes
-- clear as they read, and the next-set-bit probes clear each bit as they find it (no probe
-- finds it again) unless the key holds at least 4 times count (then together). Returns
-- the bits found and whether they were cleared in key (when clear: always, except after
-- word probes, which only read).
local function pick(key, count, n, density, taken, budget, clear)
  local out = {}
  if count <= 0 or density <= 0 then return out, false end
  budget = budget or math.huge
  if density >= DENSE then
    local bits_only = density >= DENSER
    local found = bits_only and math.min(density, 1) or 1 - (1 - math.min(density, 1)) ^ 32
    for _ = 1, 3 do
      local m = math.min(budget, math.ceil((count - #out) / found * 1.1) + 4)
      if #out >= count or m <= 0 then break end
      budget = budget - m
      if bits_only then
        probe_bits(key, m, count, n, taken, out, clear)
      else
        probe_words(key, m, count, n, taken, out)
      end
    end
    local gone = clear and bits_only or false  -- (single-bit probes cleared what they kept)
    if #out >= count or budget <= 0 then return out, gone end
    if clear and not gone then set_bits(key, out, 0) end
  end
  -- few bits to find among many: the bits found are cleared together, in one call, once the
  -- probes end or one finds only taken bits; else (and from then on) each as it is found, and
  -- taken bits found too, so no probe finds a bit twice and an exhausted key ends the probes
  local later, first = clear and density * n >= 4 * count, #out + 1
  local function clear_found()
    local found = {}
    for k = first, #out do found[#found + 1] = out[k] end
    set_bits(key, found, 0)
    later = false
  end
  while #out < count and budget > 0 do
    budget = budget - 1
    local p = next_set(key, math.random(0, n - 1), n)
    for _ = 1, 8 do
      if p == -1 or not taken[p] then break end
      if clear and not later then redis.call('SETBIT', key, p, 0) end  -- not wanted: never again
      p = next_set(key, (p + 1) % n, n)
    end
    if p == -1 then break end
    if not taken[p] then
      taken[p] = true
      out[#out + 1] = p
      if clear and not later then redis.call('SETBIT', key, p, 0) end
    elseif later then
      clear_found()
    end
  end
  if later then clear_found() end
  return out, clear and true or false
end
