#!lua flags=allow-oom
-- ODS metadata of one dataset: every decision is one atomic call of this script.
--
-- ARGV[1] command, ARGV[2] key prefix P (ends with ':'; one hash tag), ARGV[3] job,
-- ARGV[4] now (ms), then command arguments. Keys (all under P):
--   P..'t:e' / 't:d' / 't:a'  bitmaps: sample cached as encoded / decoded / augmented
--   P..'n:e' / ...            entries held per tier;  P..'u:e' / ...  units used per tier
--   P..'ref'                  one byte per sample: hits on its cached copy ('paper' policy)
--   P..'jobs'                 zset job -> lease expiry (ms)
--   P..'j:'..job              hash: n (samples of the job), epoch (latest started),
--                             s<e> (served in epoch e)
--   P..'r:'..job..':'..e      bitmap: samples the job has not been served in epoch e (its
--                             members; the complement of the paper's seen vector). The two
--                             latest epochs are kept, so ranks of one job may straddle an
--                             epoch boundary.
--   P..'g:'..job              bitmap: job used the current augmented copy
--   P..'m:'..job              bitmap: samples the job trains on (absent: all)
--   P..'pin:'..bucket         bitmap: a fetch of the sample is in flight (decided in this
--                             pin-lease time bucket); P..'pinc:'..bucket counts the extra
--                             fetches of samples pinned more than once. Bucket keys expire two
--                             leases after they start, so the pins of a crashed fetch lapse; a
--                             sample is pinned while the current or the previous bucket has it
--   P..'doom'                 set: samples to evict once unpinned ('paper' policy)
--   P..'x:c' / 'x:g'          scratch bitmaps, deleted before the script returns
-- Data keys (optional): ARGV data prefixes D_e, D_d, D_a; a value key is D..sample.
-- TIERS (the tier letters, cheapest to use first) is defined above this script when it is
-- loaded (seneca_base.tiers.with_lua_tiers).

local cmd, P, job, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local jobs_key = P .. 'jobs'

local function live_jobs()
  redis.call('ZREMRANGEBYSCORE', jobs_key, '-inf', '(' .. now)
  return redis.call('ZRANGE', jobs_key, 0, -1)
end

local band, rshift = bit.band, bit.rshift  -- the bit library, before 'bit' names a function

-- sample numbers as strings, made once per call: redis.call converts a number argument itself,
-- which made a BITFIELD of 128 SETs take 151 us against 84 us with string arguments
local DIGITS = {}
local function str(i)
  local v = DIGITS[i]
  if not v then
    v = string.format('%d', i)
    DIGITS[i] = v
  end
  return v
end
local function bit(key, i) return redis.call('GETBIT', key, i) == 1 end

-- bit i of key for every i in list (0/1 each): a bitmap up to 32 bytes per position asked is
-- read whole and tested here, a larger one with one BITFIELD call (its arguments cost more)
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
  return redis.call('BITFIELD_RO', key, unpack(args))
end

local function rest_key(j, e) return P .. 'r:' .. j .. ':' .. string.format('%d', e) end

local REST = {}  -- job -> unserved bitmap of its latest epoch, looked up once per call
local function latest_rest(j)
  if REST[j] == nil then
    REST[j] = rest_key(j, tonumber(redis.call('HGET', P .. 'j:' .. j, 'epoch') or '-1'))
  end
  return REST[j]
end

-- per sample of list, the live jobs that still need it this epoch (for the augmented tier: that
-- have not used its current copy either): 2 BITFIELD calls per live job
local function demands(list, tier, live)
  local out = {}
  for k = 1, #list do out[k] = 0 end
  for _, j in ipairs(live) do
    local r = bits(latest_rest(j), list)
    local g = tier == 'a' and bits(P .. 'g:' .. j, list) or {}
    for k = 1, #list do
      if r[k] == 1 and g[k] ~= 1 then out[k] = out[k] + 1 end
    end
  end
  return out
end

local PIN_LEASE = nil  -- ms; set by 'decide' / 'release' / 'admit' from their arguments

local function pin_key(bucket) return P .. 'pin:' .. string.format('%d', bucket) end

-- per sample of list: pinned in the current or the previous pin bucket
local function pinned_many(list)
  local b = math.floor(now / PIN_LEASE)
  local p0, p1 = bits(pin_key(b), list), bits(pin_key(b - 1), list)
  local out = {}
  for k = 1, #list do out[k] = p0[k] == 1 or p1[k] == 1 end
  return out
end

-- one BITFIELD call: set bit i of key to v for every i in list; answers the previous bits
local function set_bits(key, list, v)
  if #list == 0 then return {} end
  local args, value = {}, str(v)
  for _, i in ipairs(list) do
    args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = str(i)
    args[#args + 1] = value
  end
  return redis.call('BITFIELD', key, unpack(args))
end

local function data_key(tier, i, dp)
  if dp and dp[tier] and dp[tier] ~= '' then return dp[tier] .. i end
  return nil
end

local function drop(i, tier, dp, overhead)
  if not bit(P .. 't:' .. tier, i) then return end
  local size = 1
  local k = data_key(tier, i, dp)
  if k then
    local len = redis.call('STRLEN', k)
    if len > 0 then size = len + overhead end
    redis.call('DEL', k)
  end
  redis.call('SETBIT', P .. 't:' .. tier, i, 0)
  redis.call('DECRBY', P .. 'u:' .. tier, size)
  redis.call('DECR', P .. 'n:' .. tier)
end

-- the samples of list whose current augmented copy every live job that trains on them has used
-- (nobody can use it again); each job's bitmaps are read only for the samples still in question
local function aug_spent(list, live)
  local left = list
  for _, j in ipairs(live) do
    if #left == 0 then break end
    local m = P .. 'm:' .. j
    local mem = redis.call('EXISTS', m) == 1 and bits(m, left) or nil
    local g = bits(P .. 'g:' .. j, left)
    local still = {}
    for k, s in ipairs(left) do
      if not ((mem == nil or mem[k] == 1) and g[k] ~= 1) then still[#still + 1] = s end
    end
    left = still
  end
  return left
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

-- pin (delta 1) or unpin (delta -1) the distinct samples of list in bucket b
local function add_pins(b, list, delta)
  if #list == 0 then return end
  local pk, pc = pin_key(b), P .. 'pinc:' .. string.format('%d', b)
  if delta > 0 then
    local had = set_bits(pk, list, 1)  -- BITFIELD SET answers the previous bits
    local more = false
    for k, s in ipairs(list) do
      if had[k] == 1 then
        redis.call('HINCRBY', pc, s, 1)
        more = true
      end
    end
    redis.call('PEXPIRE', pk, 2 * PIN_LEASE)
    if more then redis.call('PEXPIRE', pc, 2 * PIN_LEASE) end
    return
  end
  local flip = list
  if redis.call('EXISTS', pc) == 1 then
    local extra = redis.call('HMGET', pc, unpack(list))
    flip = {}
    for k, s in ipairs(list) do
      if tonumber(extra[k] or '0') > 0 then
        if redis.call('HINCRBY', pc, s, -1) <= 0 then redis.call('HDEL', pc, s) end
      else
        flip[#flip + 1] = s
      end
    end
  end
  set_bits(pk, flip, 0)
end

-- the form job can use for each sample of list (nil: none); one BITFIELD call per bitmap
-- that exists
local function usable_tiers(list, job_aug)
  local out = {}
  if #list == 0 then return out end
  local have = {}
  for _, t in ipairs(TIERS) do have[t] = redis.call('EXISTS', P .. 't:' .. t) == 1 end
  local a = have.a and bits(P .. 't:a', list) or {}
  local g = (have.a and redis.call('EXISTS', job_aug) == 1) and bits(job_aug, list) or {}
  local d = have.d and bits(P .. 't:d', list) or {}
  local e = have.e and bits(P .. 't:e', list) or {}
  for k = 1, #list do
    if a[k] == 1 and g[k] ~= 1 then out[k] = 'a'
    elseif d[k] == 1 then out[k] = 'd'
    elseif e[k] == 1 then out[k] = 'e' end
  end
  return out
end

-- n, latest epoch, and served in epoch e (default: the latest); nil when the job is unknown
local function job_state(name, e)
  local h = redis.call('HMGET', P .. 'j:' .. name, 'n', 'epoch')
  if not h[1] then return nil end
  local latest = tonumber(h[2])
  e = e or latest
  local served = redis.call('HGET', P .. 'j:' .. name, 's' .. string.format('%d', e))
  return {n = tonumber(h[1]), epoch = e, latest = latest, served = tonumber(served or '0')}
end

-- the unserved bitmap of a new epoch e: the job's members, or all n samples (the bits past n
-- in the last byte are never read)
local function fill_rest(rest, n)
  local mem = P .. 'm:' .. job
  if redis.call('EXISTS', mem) == 1 then
    redis.call('COPY', mem, rest, 'REPLACE')
  else
    redis.call('DEL', rest)
    redis.call('SETBIT', rest, n - 1, 0)
    redis.call('BITOP', 'NOT', rest, rest)
  end
end

local function set_latest(st, e)
  if e > st.latest then
    redis.call('HSET', P .. 'j:' .. job, 'epoch', e)
    local old = e - 2
    redis.call('DEL', rest_key(job, old))
    redis.call('HDEL', P .. 'j:' .. job, 's' .. string.format('%d', old))
  end
end

if cmd == 'join' then
  -- ARGV[5] lease ms, ARGV[6] samples of the job, ARGV[7] n (dataset size)
  local lease, count, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  redis.call('ZADD', jobs_key, now + lease, job)
  local st = job_state(job)
  if not st then
    redis.call('HSET', P .. 'j:' .. job, 'n', count, 'epoch', -1)
    st = {n = count, epoch = -1, served = 0}
  end
  return {st.n, st.epoch, st.served}

elseif cmd == 'leave' then
  redis.call('ZREM', jobs_key, job)
  local st = job_state(job)
  if st then redis.call('DEL', rest_key(job, st.latest), rest_key(job, st.latest - 1)) end
  redis.call('DEL', P .. 'j:' .. job, P .. 'g:' .. job, P .. 'm:' .. job)
  return 1

elseif cmd == 'epoch' then
  -- ARGV[5] epoch: start it unless the job (another rank) already did; ARGV[6] n.
  -- Returns the epoch and what it has served.
  local e, n = tonumber(ARGV[5]), tonumber(ARGV[6])
  local st = job_state(job, e)
  if not st then return redis.error_reply('ODS_NOJOB') end
  if e > st.latest then
    fill_rest(rest_key(job, e), n)
    redis.call('HSET', P .. 'j:' .. job, 's' .. string.format('%d', e), 0)
    set_latest(st, e)
    return {e, 0}
  end
  if e < st.latest - 1 then return {e, st.n} end  -- long over: nothing left to serve
  return {e, st.served}

elseif cmd == 'restore' then
  -- ARGV[5] epoch, ARGV[6] n, ARGV[7] bitmap of the samples consumed in that epoch:
  -- the epoch continues with everything else (a restarted job resumes from a checkpoint)
  local e, n, consumed = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
  local st = job_state(job, e)
  if not st then return redis.error_reply('ODS_NOJOB') end
  local rest, mem, tmp = rest_key(job, e), P .. 'm:' .. job, P .. 'x:c'
  redis.call('SET', tmp, consumed)
  redis.call('SETBIT', tmp, n - 1, bit(tmp, n - 1) and 1 or 0)  -- at least n bits long
  redis.call('BITOP', 'NOT', rest, tmp)
  if redis.call('EXISTS', mem) == 1 then redis.call('BITOP', 'AND', rest, rest, mem) end
  local served = redis.call('BITCOUNT', tmp)
  redis.call('DEL', tmp)
  redis.call('HSET', P .. 'j:' .. job, 's' .. string.format('%d', e), served)
  set_latest(st, e)
  return {e, served}

elseif cmd == 'decide' then
  -- ARGV[5] batch, ARGV[6] lease ms, ARGV[7] seed, ARGV[8] n, ARGV[9] substitute (0/1),
  -- ARGV[10] policy, ARGV[11] pin lease ms, ARGV[12] epoch ('' for the latest). Returns
  -- epoch, served, substitutions, samples, tier letters ('' for storage), pin bucket.
  local want, lease, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
  local substitute, policy = ARGV[9] == '1', ARGV[10]
  PIN_LEASE = tonumber(ARGV[11])
  math.randomseed(tonumber(ARGV[7]))
  local st = job_state(job, tonumber(ARGV[12] or ''))
  if not st then return redis.error_reply('ODS_NOJOB') end
  redis.call('ZADD', jobs_key, now + lease, job)
  local bucket = math.floor(now / PIN_LEASE)
  local U, aug, C = rest_key(job, st.epoch), P .. 'g:' .. job, P .. 'x:c'
  local left = st.n - st.served
  if want > left then want = left end
  if want <= 0 or redis.call('EXISTS', U) == 0 then
    return {st.epoch, st.served, 0, {}, {}, bucket}
  end
  local taken = {}
  local picked = pick_many(U, want, n, left / n, taken)
  local tiers = usable_tiers(picked, aug)
  local misses = {}
  for k = 1, #picked do
    if not tiers[k] then misses[#misses + 1] = k end
  end
  local subs, restore = 0, {}
  if substitute and #misses > 0 then
    -- C = (encoded | decoded | (augmented & ~used by job)) & U, from the bitmaps that exist
    local parts = {}
    for _, t in ipairs({'e', 'd'}) do
      if redis.call('EXISTS', P .. 't:' .. t) == 1 then parts[#parts + 1] = P .. 't:' .. t end
    end
    if redis.call('EXISTS', P .. 't:a') == 1 then
      local G = P .. 'x:g'
      if redis.call('EXISTS', aug) == 1 then
        redis.call('BITOP', 'NOT', G, aug)
        redis.call('BITOP', 'AND', G, G, P .. 't:a')
      else
        redis.call('COPY', P .. 't:a', G, 'REPLACE')
      end
      parts[#parts + 1] = G
    end
    if #parts == 0 then
      redis.call('DEL', C)
    elseif #parts == 1 then
      redis.call('BITOP', 'AND', C, parts[1], U)
    else
      redis.call('BITOP', 'OR', C, unpack(parts))
      redis.call('BITOP', 'AND', C, C, U)
    end
    redis.call('DEL', P .. 'x:g')
    local chosen = pick_many(C, #misses, n, redis.call('BITCOUNT', C) / n, taken)
    local found = usable_tiers(chosen, aug)
    local displaced = {}
    for m, s in ipairs(chosen) do
      displaced[m] = picked[misses[m]]
      picked[misses[m]] = s
      tiers[misses[m]] = found[m]
    end
    subs = #chosen
    redis.call('DEL', C)
    restore = displaced
  end
  -- one call: the served samples leave U, the displaced misses stay (or come back) in it
  local args = {}
  for _, i in ipairs(picked) do
    args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = str(i); args[#args + 1] = '0'
  end
  for _, i in ipairs(restore) do
    args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = str(i); args[#args + 1] = '1'
  end
  redis.call('BITFIELD', U, unpack(args))
  local out_tiers, augs, hits = {}, {}, {}
  for k, s in ipairs(picked) do
    local t = tiers[k]
    out_tiers[k] = t or ''
    if t then
      hits[#hits + 1] = s
      if t == 'a' then augs[#augs + 1] = s end
    end
  end
  set_bits(aug, augs, 1)
  if #hits > 0 then
    add_pins(bucket, hits, 1)
    if policy == 'paper' then
      local live = #live_jobs()
      local args = {'OVERFLOW', 'SAT'}
      for _, s in ipairs(hits) do
        args[#args + 1] = 'INCRBY'; args[#args + 1] = 'u8'; args[#args + 1] = '#' .. s
        args[#args + 1] = 1
      end
      local refs = redis.call('BITFIELD', P .. 'ref', unpack(args))
      for m, s in ipairs(hits) do
        if refs[m] >= live then redis.call('SADD', P .. 'doom', s) end
      end
    end
  end
  redis.call('HINCRBY', P .. 'j:' .. job, 's' .. string.format('%d', st.epoch), #picked)
  return {st.epoch, st.served + #picked, subs, picked, out_tiers, bucket}

elseif cmd == 'release' then
  -- ARGV[5] policy, ARGV[6] overhead, ARGV[7..9] data prefixes a d e, ARGV[10] pin lease ms,
  -- ARGV[11] the decision's pin bucket, then its hit samples
  local policy, overhead = ARGV[5], tonumber(ARGV[6])
  local dp = {a = ARGV[7], d = ARGV[8], e = ARGV[9]}
  PIN_LEASE = tonumber(ARGV[10])
  local bucket = tonumber(ARGV[11])
  local evicted = {}
  local hits = {}
  for k = 12, #ARGV do hits[#hits + 1] = tonumber(ARGV[k]) end
  add_pins(bucket, hits, -1)
  -- candidates: 'paper' evicts doomed samples, 'seneca' drops spent augmented copies
  local cands = {}
  if policy == 'paper' then
    local doomed = redis.call('SMISMEMBER', P .. 'doom', unpack(hits))
    for k, s in ipairs(hits) do if doomed[k] == 1 then cands[#cands + 1] = s end end
  elseif redis.call('EXISTS', P .. 't:a') == 1 then
    local a = bits(P .. 't:a', hits)
    for k, s in ipairs(hits) do if a[k] == 1 then cands[#cands + 1] = s end end
  end
  if policy == 'paper' then
    local pins = pinned_many(cands)
    for k, s in ipairs(cands) do
      if not pins[k] and redis.call('SREM', P .. 'doom', s) == 1 then
        for _, t in ipairs(TIERS) do drop(s, t, dp, overhead) end
        redis.call('BITFIELD', P .. 'ref', 'SET', 'u8', '#' .. s, 0)
        evicted[#evicted + 1] = s
      end
    end
  else
    local spent = aug_spent(cands, #cands > 0 and live_jobs() or {})
    local pins = pinned_many(spent)
    for k, s in ipairs(spent) do
      if not pins[k] then
        drop(s, 'a', dp, overhead)
        evicted[#evicted + 1] = s
      end
    end
  end
  return evicted

elseif cmd == 'admit' then
  -- ARGV[5] policy, ARGV[6] overhead, ARGV[7..9] data prefixes a d e,
  -- ARGV[10..12] capacity a d e (units), ARGV[13] seed, ARGV[14] eviction rounds per sample,
  -- ARGV[15] candidates per round, ARGV[16] pin lease ms, then per sample four values: index,
  -- tier letter, size (units),
  -- the key its value was staged under ('' when none; the caller SET it, with an expiry, in
  -- the same pipeline, so values never pass through Lua). An admitted value is renamed to its
  -- data key; any other staged key is deleted. Returns per sample 1 admitted, 2 already cached
  -- in that form, 0 refused (also when its staged key is missing: the SET failed).
  local policy, overhead = ARGV[5], tonumber(ARGV[6])
  local dp = {a = ARGV[7], d = ARGV[8], e = ARGV[9]}
  local cap = {a = tonumber(ARGV[10]), d = tonumber(ARGV[11]), e = tonumber(ARGV[12])}
  math.randomseed(tonumber(ARGV[13]))
  local probes, candidates = tonumber(ARGV[14]), tonumber(ARGV[15])
  PIN_LEASE = tonumber(ARGV[16])
  local live = live_jobs()
  local result = {}
  for k = 17, #ARGV, 4 do
    local s, t, size, staged = tonumber(ARGV[k]), ARGV[k + 1], tonumber(ARGV[k + 2]), ARGV[k + 3]
    local tkey = P .. 't:' .. t
    local ok = 0
    if staged ~= '' and redis.call('EXISTS', staged) == 0 then
      ok = 0  -- its value never arrived
    elseif bit(tkey, s) then
      ok = 2  -- already cached in this form
    else
      local used = tonumber(redis.call('GET', P .. 'u:' .. t) or '0')
      if used + size > cap[t] and policy ~= 'paper' then
        local want = demands({s}, t, live)[1]
        local nbits = redis.call('STRLEN', tkey) * 8
        for _ = 1, probes do
          if used + size <= cap[t] or nbits == 0 then break end
          -- random entries; the unpinned one that live jobs need least goes
          local cands = {}
          for _ = 1, candidates do
            local r = math.random(0, nbits - 1)
            local v = redis.call('BITPOS', tkey, 1, r, nbits - 1, 'BIT')
            if v == -1 then v = redis.call('BITPOS', tkey, 1, 0, nbits - 1, 'BIT') end
            if v ~= -1 then cands[#cands + 1] = v end
          end
          local pins, need = pinned_many(cands), demands(cands, t, live)
          local best, best_d = nil, nil
          for k, v in ipairs(cands) do
            if not pins[k] and (best_d == nil or need[k] < best_d) then best, best_d = v, need[k] end
          end
          if best == nil or best_d >= want then break end
          drop(best, t, dp, overhead)
          used = tonumber(redis.call('GET', P .. 'u:' .. t) or '0')
        end
      end
      if used + size <= cap[t] then
        redis.call('SETBIT', tkey, s, 1)
        redis.call('INCRBY', P .. 'u:' .. t, size)
        redis.call('INCR', P .. 'n:' .. t)
        local dk = data_key(t, s, dp)
        if dk and staged ~= '' then
          redis.call('RENAME', staged, dk)
          redis.call('PERSIST', dk)
          staged = ''
        end
        if t == 'a' then
          for _, j in ipairs(live) do redis.call('SETBIT', P .. 'g:' .. j, s, 0) end
          redis.call('SETBIT', P .. 'g:' .. job, s, 1)  -- the admitting job made this copy
        end
        if policy == 'paper' then redis.call('BITFIELD', P .. 'ref', 'SET', 'u8', '#' .. s, 0) end
        ok = 1
      end
    end
    if staged ~= '' then redis.call('DEL', staged) end
    result[#result + 1] = ok
  end
  return result

elseif cmd == 'state' then
  local live = live_jobs()
  local out = {}
  for _, t in ipairs(TIERS) do
    out[#out + 1] = tonumber(redis.call('GET', P .. 'n:' .. t) or '0')
    out[#out + 1] = tonumber(redis.call('GET', P .. 'u:' .. t) or '0')
  end
  out[#out + 1] = #live
  return out
end
return redis.error_reply('ODS_BADCMD ' .. tostring(cmd))
