#!lua flags=allow-oom
-- ODS metadata of one dataset: every decision is one atomic call of this script.
--
-- ARGV[1] command, ARGV[2] key prefix P (ends with ':'; one hash tag), ARGV[3] job,
-- ARGV[4] now (ms), then command arguments. Keys (all under P):
--   P..'t:e' / 't:d' / 't:a'  bitmaps: sample cached as encoded / decoded / augmented
--   P..'n:e' / ...            entries held per tier;  P..'u:e' / ...  units used per tier
--   P..'ref'                  one byte per sample: hits on its cached copy ('paper' policy)
--   P..'jobs'                 zset job -> lease expiry (ms)
--   P..'j:'..job              hash: n (samples of the job), epoch, served
--   P..'s:'..job              bitmap: served to job this epoch (seen)
--   P..'g:'..job              bitmap: job used the current augmented copy
--   P..'m:'..job              bitmap: samples the job trains on (absent: all)
--   P..'pin' / 'pinx'         hash sample -> fetches in flight / their lease expiry (ms)
--   P..'doom'                 set: samples to evict once unpinned ('paper' policy)
--   P..'x:u' / 'x:c'          scratch bitmaps, deleted before the script returns
-- Data keys (optional): ARGV data prefixes D_e, D_d, D_a; a value key is D..sample.

local cmd, P, job, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local TIERS = {'a', 'd', 'e'}
local jobs_key = P .. 'jobs'

local function live_jobs()
  redis.call('ZREMRANGEBYSCORE', jobs_key, '-inf', '(' .. now)
  return redis.call('ZRANGE', jobs_key, 0, -1)
end

local function bit(key, i) return redis.call('GETBIT', key, i) == 1 end

local function member(j, i)
  local m = P .. 'm:' .. j
  if redis.call('EXISTS', m) == 0 then return true end
  return bit(m, i)
end

-- live jobs that still need sample i this epoch (for the augmented tier: that have not used
-- its current copy either)
local function demand(i, tier, live)
  local d = 0
  for _, j in ipairs(live) do
    if member(j, i) and not bit(P .. 's:' .. j, i)
        and (tier ~= 'a' or not bit(P .. 'g:' .. j, i)) then
      d = d + 1
    end
  end
  return d
end

local function pinned(i)
  local c = tonumber(redis.call('HGET', P .. 'pin', i) or '0')
  if c <= 0 then return false end
  return tonumber(redis.call('HGET', P .. 'pinx', i) or '0') > now
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

-- every live job that trains on i has used its current augmented copy: nobody can use it again
local function aug_spent(i, live)
  for _, j in ipairs(live) do
    if member(j, i) and not bit(P .. 'g:' .. j, i) then return false end
  end
  return true
end

-- first set bit of key at or after a random position, wrapping; -1 when none in [0, n)
local function pick(key, n)
  local r = math.random(0, n - 1)
  local p = redis.call('BITPOS', key, 1, r, n - 1, 'BIT')
  if p == -1 and r > 0 then p = redis.call('BITPOS', key, 1, 0, r - 1, 'BIT') end
  if p ~= -1 then redis.call('SETBIT', key, p, 0) end
  return p
end

local function usable_tier(i, job_aug)
  if bit(P .. 't:a', i) and not bit(job_aug, i) then return 'a' end
  if bit(P .. 't:d', i) then return 'd' end
  if bit(P .. 't:e', i) then return 'e' end
  return nil
end

local function job_state(name)
  local h = redis.call('HMGET', P .. 'j:' .. name, 'n', 'epoch', 'served')
  if not h[1] then return nil end
  return {n = tonumber(h[1]), epoch = tonumber(h[2]), served = tonumber(h[3])}
end

if cmd == 'join' then
  -- ARGV[5] lease ms, ARGV[6] samples of the job, ARGV[7] n (dataset size)
  local lease, count, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  redis.call('ZADD', jobs_key, now + lease, job)
  local st = job_state(job)
  if not st then
    redis.call('HSET', P .. 'j:' .. job, 'n', count, 'epoch', -1, 'served', 0)
    st = {n = count, epoch = -1, served = 0}
  end
  redis.call('SETBIT', P .. 's:' .. job, n - 1, 0)  -- full length, so NOT stays in range
  return {st.n, st.epoch, st.served}

elseif cmd == 'leave' then
  redis.call('ZREM', jobs_key, job)
  redis.call('DEL', P .. 'j:' .. job, P .. 's:' .. job, P .. 'g:' .. job, P .. 'm:' .. job)
  return 1

elseif cmd == 'epoch' then
  -- ARGV[5] epoch: start it unless the job (another rank) already did
  local e = tonumber(ARGV[5])
  local st = job_state(job)
  if not st then return redis.error_reply('ODS_NOJOB') end
  if e > st.epoch then
    local seen = P .. 's:' .. job
    local len = redis.call('STRLEN', seen)
    redis.call('DEL', seen)
    if len > 0 then redis.call('SETBIT', seen, len * 8 - 1, 0) end
    redis.call('HSET', P .. 'j:' .. job, 'epoch', e, 'served', 0)
    return {e, 0}
  end
  return {st.epoch, st.served}

elseif cmd == 'decide' then
  -- ARGV[5] batch, ARGV[6] lease ms, ARGV[7] seed, ARGV[8] n, ARGV[9] substitute (0/1),
  -- ARGV[10] policy, ARGV[11] pin lease ms
  local want, lease, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
  local substitute, policy, pin_lease = ARGV[9] == '1', ARGV[10], tonumber(ARGV[11])
  math.randomseed(tonumber(ARGV[7]))
  local st = job_state(job)
  if not st then return redis.error_reply('ODS_NOJOB') end
  redis.call('ZADD', jobs_key, now + lease, job)
  local left = st.n - st.served
  if want > left then want = left end
  if want <= 0 then return {st.epoch, st.served, 0, {}, {}} end
  local seen, aug, mem = P .. 's:' .. job, P .. 'g:' .. job, P .. 'm:' .. job
  local U, C = P .. 'x:u', P .. 'x:c'
  redis.call('BITOP', 'NOT', U, seen)
  if redis.call('EXISTS', mem) == 1 then redis.call('BITOP', 'AND', U, U, mem) end
  local picked, tiers, misses = {}, {}, {}
  for k = 1, want do
    local s = pick(U, n)
    if s == -1 then break end
    picked[k] = s
    tiers[k] = usable_tier(s, aug)
    if not tiers[k] then misses[#misses + 1] = k end
  end
  local subs = 0
  if substitute and #misses > 0 then
    redis.call('BITOP', 'OR', C, P .. 't:e', P .. 't:d')
    if redis.call('EXISTS', P .. 't:a') == 1 then
      if redis.call('EXISTS', aug) == 1 then
        redis.call('BITOP', 'NOT', P .. 'x:g', aug)
        redis.call('BITOP', 'AND', P .. 'x:g', P .. 'x:g', P .. 't:a')
        redis.call('BITOP', 'OR', C, C, P .. 'x:g')
        redis.call('DEL', P .. 'x:g')
      else
        redis.call('BITOP', 'OR', C, C, P .. 't:a')
      end
    end
    redis.call('BITOP', 'AND', C, C, U)
    for _, k in ipairs(misses) do
      local s = pick(C, n)
      if s == -1 then break end
      picked[k] = s
      tiers[k] = usable_tier(s, aug)
      subs = subs + 1
    end
  end
  redis.call('DEL', U, C)
  local live = nil
  local out_tiers = {}
  for k, s in ipairs(picked) do
    redis.call('SETBIT', seen, s, 1)
    local t = tiers[k]
    out_tiers[k] = t or ''
    if t then
      redis.call('HINCRBY', P .. 'pin', s, 1)
      redis.call('HSET', P .. 'pinx', s, now + pin_lease)
      if t == 'a' then redis.call('SETBIT', aug, s, 1) end
      if policy == 'paper' then
        live = live or live_jobs()
        local r = redis.call('BITFIELD', P .. 'ref', 'OVERFLOW', 'SAT', 'INCRBY', 'u8', '#' .. s, 1)[1]
        if r >= #live then redis.call('SADD', P .. 'doom', s) end
      end
    end
  end
  redis.call('HINCRBY', P .. 'j:' .. job, 'served', #picked)
  return {st.epoch, st.served + #picked, subs, picked, out_tiers}

elseif cmd == 'release' then
  -- ARGV[5] policy, ARGV[6] overhead, ARGV[7..9] data prefixes a d e, then samples
  local policy, overhead = ARGV[5], tonumber(ARGV[6])
  local dp = {a = ARGV[7], d = ARGV[8], e = ARGV[9]}
  local evicted = {}
  for k = 10, #ARGV do
    local s = tonumber(ARGV[k])
    if redis.call('HINCRBY', P .. 'pin', s, -1) <= 0 then
      redis.call('HDEL', P .. 'pin', s)
      redis.call('HDEL', P .. 'pinx', s)
    end
    if not pinned(s) then
      local gone = false
      if policy == 'paper' and redis.call('SREM', P .. 'doom', s) == 1 then
        for _, t in ipairs(TIERS) do drop(s, t, dp, overhead) end
        redis.call('BITFIELD', P .. 'ref', 'SET', 'u8', '#' .. s, 0)
        gone = true
      elseif policy ~= 'paper' and bit(P .. 't:a', s) and aug_spent(s, live_jobs()) then
        drop(s, 'a', dp, overhead)
        gone = true
      end
      if gone then evicted[#evicted + 1] = s end
    end
  end
  return evicted

elseif cmd == 'admit' then
  -- ARGV[5] policy, ARGV[6] overhead, ARGV[7..9] data prefixes a d e,
  -- ARGV[10..12] capacity a d e (units), ARGV[13] seed, ARGV[14] evictions tried per sample,
  -- then per sample four values: index, tier letter, size (units), value ('' when none).
  -- Returns per sample 1 admitted, 2 already cached in that form, 0 refused.
  local policy, overhead = ARGV[5], tonumber(ARGV[6])
  local dp = {a = ARGV[7], d = ARGV[8], e = ARGV[9]}
  local cap = {a = tonumber(ARGV[10]), d = tonumber(ARGV[11]), e = tonumber(ARGV[12])}
  math.randomseed(tonumber(ARGV[13]))
  local probes = tonumber(ARGV[14])
  local live = live_jobs()
  local result = {}
  for k = 15, #ARGV, 4 do
    local s, t, size, value = tonumber(ARGV[k]), ARGV[k + 1], tonumber(ARGV[k + 2]), ARGV[k + 3]
    local tkey = P .. 't:' .. t
    local ok = 0
    if bit(tkey, s) then
      ok = 2  -- already cached in this form
    else
      local used = tonumber(redis.call('GET', P .. 'u:' .. t) or '0')
      if used + size > cap[t] and policy ~= 'paper' then
        local want = demand(s, t, live)
        local nbits = redis.call('STRLEN', tkey) * 8
        for _ = 1, probes do
          if used + size <= cap[t] or nbits == 0 then break end
          local best, best_d = nil, nil
          for _ = 1, 8 do
            local r = math.random(0, nbits - 1)
            local v = redis.call('BITPOS', tkey, 1, r, nbits - 1, 'BIT')
            if v == -1 then v = redis.call('BITPOS', tkey, 1, 0, nbits - 1, 'BIT') end
            if v ~= -1 and not pinned(v) then
              local d = demand(v, t, live)
              if best_d == nil or d < best_d then best, best_d = v, d end
            end
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
        if dk and value ~= '' then redis.call('SET', dk, value) end
        if t == 'a' then
          for _, j in ipairs(live) do redis.call('SETBIT', P .. 'g:' .. j, s, 0) end
          redis.call('SETBIT', P .. 'g:' .. job, s, 1)  -- the admitting job made this copy
        end
        if policy == 'paper' then redis.call('BITFIELD', P .. 'ref', 'SET', 'u8', '#' .. s, 0) end
        ok = 1
      end
    end
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
