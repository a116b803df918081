-- Bitmap helpers of the engine's functions (assembled first; see ods/functions/__init__.py).

local band, rshift  -- the bit library is there only while a function runs: set by begin

-- sample numbers as strings, made once: redis.call converts a number argument itself, which
-- made a BITFIELD of 128 SETs take 151 us against 84 us with string arguments
local DIGITS = {}
local function str(i)
  local v = DIGITS[i]
  if not v then
    v = string.format('%d', i)
    DIGITS[i] = v
  end
  return v
end

-- Lua's unpack takes a few thousand values at most: commands whose arguments grow with a batch
-- are sent in chunks of at most CHUNK of them (a multiple of 2, 3 and 4: whole items)
local CHUNK = 960

-- redis.call(cmd, key, pre..., args...) in chunks of whole items of width arguments; the
-- replies' elements concatenated (pre: nil or two arguments repeated before each chunk)
local function chunked(cmd, key, pre, args, width)
  local out, step = {}, CHUNK - CHUNK % width
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

-- bit i of key for every i in list (0/1 each): a bitmap up to 32 bytes per position asked is
-- read whole and tested here, a larger one with one BITFIELD_RO call
local function bits(key, list)
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
  local args = {}
  for _, i in ipairs(list) do
    args[#args + 1] = 'GET'; args[#args + 1] = 'u1'; args[#args + 1] = str(i)
  end
  return chunked('BITFIELD_RO', key, nil, args, 3)
end

-- one BITFIELD call: set bit i of key to v for every i in list; answers the previous bits
local function set_bits(key, list, v)
  if #list == 0 then return {} end
  local args, value = {}, str(v)
  for _, i in ipairs(list) do
    args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = str(i)
    args[#args + 1] = value
  end
  return chunked('BITFIELD', key, nil, args, 4)
end

-- first set bit of key at or after position r, wrapping; -1 when none in [0, n)
local function next_set(key, r, n)
  local p = redis.call('BITPOS', key, 1, r, n - 1, 'BIT')
  if p == -1 and r > 0 then p = redis.call('BITPOS', key, 1, 0, r - 1, 'BIT') end
  return p
end

-- the same for a bitmap read as the string s, skipping the positions in taken
local function next_set_in(s, r, n, taken)
  local byte, floor, len = string.byte, math.floor, #s
  for pass = 1, 2 do
    local i, last = r, n - 1
    if pass == 2 then i, last = 0, r - 1 end
    while i <= last do
      local q = floor(i / 8)
      local b = q < len and byte(s, q + 1) or 0
      if b == 0 then
        i = (q + 1) * 8
      else
        if band(rshift(b, 7 - i % 8), 1) == 1 and not taken[i] then return i end
        i = i + 1
      end
    end
  end
  return -1
end

-- up to count distinct set bits of key in [0, n), at random, not in taken (which gains them).
-- While the bitmap is dense, uniform random probes read in one BITFIELD call; then the next
-- set bit after random positions: found in the bitmap read once when it is small (up to 32
-- bytes per bit asked), else with BITPOS, clearing each bit it returns in key so no bit comes
-- twice (callers restore or clear those bits as the decision requires).
local function pick_many(key, count, n, density, taken)
  local out = {}
  if count <= 0 then return out end
  if density >= 0.4 then  -- below, finding bits with BITPOS takes fewer steps
    local m = math.ceil(count / density * 1.3) + 4
    local probes = {}
    for k = 1, m do probes[k] = math.random(0, n - 1) end
    local got = bits(key, probes)
    for k = 1, m do
      if #out >= count then break end
      local p = probes[k]
      if got[k] == 1 and not taken[p] then
        taken[p] = true
        out[#out + 1] = p
      end
    end
  end
  local s = nil
  if #out < count and redis.call('STRLEN', key) <= 32 * (count - #out) then
    s = redis.call('GET', key) or ''
  end
  while #out < count do
    local p
    if s then
      p = next_set_in(s, math.random(0, n - 1), n, taken)
    else
      p = next_set(key, math.random(0, n - 1), n)
      if p ~= -1 then redis.call('SETBIT', key, p, 0) end
    end
    if p == -1 then break end
    if not taken[p] then
      taken[p] = true
      out[#out + 1] = p
    end
  end
  return out
end
