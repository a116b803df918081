-- Shared helpers of the engine's functions (assembled before the commands; see ods/functions/__init__.py).
--
-- Every function declares every key it touches (ods.keys.Keys.declared), and begin() gives
-- them names: K.t[<letter>] and K.sz[<letter>] (tier bitmaps and sizes, the augmented tier's of
-- the caller's view), K.used, K.jobs, K.ref, K.doom, K.xc and K.xg (scratch bitmaps, deleted
-- before the function returns), K.gc[<letter>] (evicted entries -> when their value is
-- collected), the caller's job's K.j, K.r, K.p, K.g, K.m, its pin-lease bucket's K.pin, K.pinc,
-- K.pend and the bucket before's K.pin1, K.pinc1, K.pend1, then each declared job's r, g and m
-- (DECLARED). The order of the keys, these names and each key's type are generated from
-- ods.keys.Keys.layout (declared_keys, declared_job, KEY_TYPES, JOB_KEYS, assembled before
-- this file); ods/keys.py says what each key holds.
-- A job's name ends with |<view> (none: no view). Augmented copies are the caller's view's:
-- only jobs of that view count for their demand, and only they use them.
-- ARGV: now (ms), job, pin lease (ms), orphan grace (ms), orphans collected per call, values
-- (1: sizes are bytes kept in sz), how long (ms) after its lease a job's keys are deleted, the
-- number D of declared jobs, their names, then the command's own arguments.
-- Values are not in these keys' slot: functions decide and account, and return the samples
-- whose values the caller must delete ({letter, sample} pairs). Every entry dropped is also
-- noted in gc: once its grace has passed, the next admit or release returns it again (unless
-- the sample was cached again since), so a value whose deleter crashed, or that a late rename
-- put back after its entry went, is deleted too.

local K, F, job, now, PIN_LEASE, GRACE, COLLECT, VALUES, FORGET, DECLARED, EVICTED, DROPPED

local function view_of(name) return string.match(name, '|([^|]*)$') or '' end

-- the first declared key that holds another type than the engine keeps there (nil: none),
-- checked before anything is written, so a call that fails on foreign data changes nothing
local function foreign(keys)
  for k, key in ipairs(keys) do
    local t = redis.call('TYPE', key).ok
    local want = KEY_TYPES[k]
    if k >= FIRST_JOB_KEY then want = KEY_TYPES[FIRST_JOB_KEY + (k - FIRST_JOB_KEY) % JOB_KEY_COUNT] end
    if t ~= 'none' and t ~= want then return key end
  end
  return nil
end

local function begin(keys, args)
  band, bor, bnot, rshift = bit.band, bit.bor, bit.bnot, bit.rshift
  STR, format = {}, string.format
  K = declared_keys(keys)
  now, job, PIN_LEASE, GRACE = tonumber(args[1]), args[2], tonumber(args[3]), tonumber(args[4])
  local view = view_of(job)
  F = {}  -- each tier's form: its letter, the augmented tier's with the caller's view
  for _, t in ipairs(TIERS) do F[t] = t end
  if view ~= '' then F[TIER.augmented] = TIER.augmented .. ':' .. view end
  COLLECT, VALUES, FORGET = tonumber(args[5]), args[6] == '1', tonumber(args[7])
  local d = tonumber(args[8])
  DECLARED = {}
  for k = 1, d do
    local name = args[8 + k]
    DECLARED[k] = declared_job(keys, k)
    DECLARED[k].name, DECLARED[k].same = name, view_of(name) == view
  end
  EVICTED, DROPPED = {}, {[TIER.encoded] = {}, [TIER.augmented] = {}}
  return 9 + d, foreign(keys)  -- where the command's own arguments start; a bad key
end

local function fail(code, text) return redis.error_reply(code .. ' ' .. (text or '')) end

-- the cache policies by name, each a table filled by its file in policies/ (assembled after
-- these helpers): evicts (an admission over budget evicts), spends (a decision serves first
-- the cached copies the other jobs need least), served(hits), admitted(t, added),
-- released(hits, live)
local POLICY = {}

local function policy_of(name)
  local p = POLICY[name]
  if not p then error('SENECA_POLICY unknown policy ' .. tostring(name)) end
  return p
end

-- forget the pace of the job name (weighed): it left
local function forget_pace(name)
  redis.call('HDEL', K.pace, 't:' .. name, 'g:' .. name, 'c:' .. name)
end

-- the live jobs. A job whose lease ran out FORGET ms ago or more leaves: its keys are deleted
-- (a few per call), so a job that crashed leaves no metadata behind. One that was only slow
-- joins again and restores its epoch from what it has served (the sampler does).
local function live_jobs()
  local gone = redis.call('ZRANGE', K.jobs, '-inf', '(' .. (now - FORGET), 'BYSCORE', 'LIMIT', 0, 8)
  for _, name in ipairs(gone) do
    redis.call('ZREM', K.jobs, name)
    for _, key in ipairs(job_keys_of(K, name)) do redis.call('DEL', key) end
    forget_pace(name)
  end
  return redis.call('ZRANGE', K.jobs, now, '+inf', 'BYSCORE')
end

-- the declared jobs when they are exactly the live jobs, else nil (the caller retries with the
-- live ones: SENECA_JOBS); called before the function writes anything else
local function live_declared()
  local live, names = live_jobs(), {}
  if #live ~= #DECLARED then return nil end
  for _, j in ipairs(live) do names[j] = true end
  for _, d in ipairs(DECLARED) do
    if not names[d.name] then return nil end
  end
  return DECLARED
end

-- per sample of list, the declared live jobs that still need it this epoch (for the augmented
-- tier: the jobs of the caller's view that have not used its current copy either; for a new
-- copy (fresh), which every job of the view may use, all of them), each counting its weight
-- j.w where weighed gave it one. args: reads(list), when the caller has it
local function demands(list, tier, live, args, fresh)
  local out = {}
  for k = 1, #list do out[k] = 0 end
  args = args or reads(list)
  for _, j in ipairs(live) do
    if tier ~= TIER.augmented or j.same then
      local r = bits(j.r, list, args)
      local g = tier == TIER.augmented and not fresh and bits(j.g, list, args) or {}
      for k = 1, #list do
        if r[k] == 1 and g[k] ~= 1 then out[k] = out[k] + (j.w or 1) end
      end
    end
  end
  return out
end

-- the live jobs whose demand counts in tier t (for the augmented tier, the caller's view's), at
-- most `most` of them at random: demand is estimated from a sample of the jobs, so that an
-- admission's or a decision's work does not grow with their number
local function demand_jobs(t, live, most)
  local out = {}
  for _, j in ipairs(live) do
    if t ~= TIER.augmented or j.same then out[#out + 1] = j end
  end
  for k = #out, 2, -1 do
    local m = math.random(1, k)
    out[k], out[m] = out[m], out[k]
  end
  for k = #out, most + 1, -1 do out[k] = nil end
  return out
end

-- How soon a job takes a copy it needs (K.pace; ods/keys.py): every decision is a tick; a
-- job's gap is the ticks between its decisions (smoothed: each new gap moves it by
-- PACE_SMOOTH of the difference), its backlog the cached copies it may use per sample it
-- asks for, after its latest decision. A copy it needs is taken in about gap x max(1,
-- backlog) ticks: at its next decision, or, where it has more such copies than a batch holds,
-- a batch of them per decision.
local PACE_SMOOTH, PACE_UNIT, PACE_MOST = 0.2, 4, 8

-- count a tick: the caller's decision, which left it backlog cached copies per sample asked
local function note_pace(backlog)
  local tick = redis.call('HINCRBY', K.pace, 'ticks', 1)
  local h = redis.call('HMGET', K.pace, 't:' .. job, 'g:' .. job)
  local last, gap = tonumber(h[1] or ''), tonumber(h[2] or '')
  if last then gap = gap and gap + PACE_SMOOTH * (tick - last - gap) or tick - last end
  redis.call('HSET', K.pace, 't:' .. job, tick, 'c:' .. job, backlog)
  if gap then redis.call('HSET', K.pace, 'g:' .. job, gap) end
end

-- jobs, each given its weight in demand (j.w, a whole number from 1 to PACE_UNIT x
-- PACE_MOST): PACE_UNIT times how much sooner than these jobs' mean it takes a copy it needs
-- (PACE_UNIT where its pace is not known yet). Equally paced jobs weigh PACE_UNIT each: demand
-- orders copies as a count of jobs would.
local function weighed(jobs)
  if #jobs == 0 then return jobs end
  local fields = {}
  for m, j in ipairs(jobs) do fields[2 * m - 1], fields[2 * m] = 'g:' .. j.name, 'c:' .. j.name end
  local h = redis.call('HMGET', K.pace, unpack(fields))
  local waits, sum, known = {}, 0, 0
  for m = 1, #jobs do
    local gap = tonumber(h[2 * m - 1] or '')
    if gap and gap > 0 then
      waits[m] = gap * math.max(1, tonumber(h[2 * m] or '') or 0)
      sum, known = sum + waits[m], known + 1
    end
  end
  for m, j in ipairs(jobs) do
    local w = waits[m] and math.floor(PACE_UNIT * sum / known / waits[m] + 0.5) or PACE_UNIT
    j.w = math.max(1, math.min(PACE_UNIT * PACE_MOST, w))
  end
  return jobs
end

-- per sample of list: pinned in the current or the previous pin bucket
local function pinned_many(list)
  local p0, p1 = bits(K.pin, list), bits(K.pin1, list)
  local out = {}
  for k = 1, #list do out[k] = p0[k] == 1 or p1[k] == 1 end
  return out
end

-- the units charged for sample i's entry in tier
local function size_of(tier, i)
  if not VALUES then return 1 end
  return redis.call('BITFIELD_RO', K.sz[tier], 'GET', 'u32', '#' .. str(i))[1]
end

-- note sample i's entry in tier as dropped by this call: its value is the caller's to delete
-- (EVICTED), and again after the grace (DROPPED, for gc)
local function dropped(i, tier)
  EVICTED[#EVICTED + 1] = tier
  EVICTED[#EVICTED + 1] = i
  if VALUES then
    local gc = DROPPED[tier == TIER.augmented and TIER.augmented or TIER.encoded]
    gc[#gc + 1] = now + GRACE
    gc[#gc + 1] = tier .. str(i)
  end
end

-- forget sample i's entry in tier (its value is the caller's to delete: EVICTED); returns the
-- units it freed (0: not cached)
local function drop(i, tier)
  if not bit1(K.t[tier], i) then return 0 end
  local size = size_of(tier, i)
  redis.call('SETBIT', K.t[tier], i, 0)
  redis.call('HINCRBY', K.used, F[tier], -size)
  redis.call('HINCRBY', K.used, 'n' .. F[tier], -1)
  dropped(i, tier)
  return size
end

-- note the entries dropped by this call in gc (one ZADD per key); returns EVICTED
local function noted()
  for t, gc in pairs(DROPPED) do
    chunked('ZADD', K.gc[t], nil, gc, 2)
  end
  return EVICTED
end

-- add to EVICTED up to COLLECT entries of gc whose grace has passed and whose sample is not
-- cached in that tier again (its value, if any, is an orphan)
local function collect()
  if not VALUES then return end
  for _, key in ipairs({K.gc[TIER.encoded], K.gc[TIER.augmented]}) do
    local due = redis.call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0, COLLECT)
    if #due > 0 then redis.call('ZREM', key, unpack(due)) end
    for _, m in ipairs(due) do
      local t, i = string.sub(m, 1, 1), tonumber(string.sub(m, 2))
      if not bit1(K.t[t], i) then
        EVICTED[#EVICTED + 1] = t
        EVICTED[#EVICTED + 1] = i
      end
    end
  end
end

-- the samples of list whose current augmented copy every live job of the caller's view that
-- trains on them has used
-- (nobody can use it again); each job's bitmaps are read only for the samples still in question
local function aug_spent(list, live)
  local left = list
  for _, j in ipairs(live) do
    if #left == 0 then break end
    if j.same then
      local mem = redis.call('EXISTS', j.m) == 1 and bits(j.m, left) or nil
      local g = bits(j.g, left)
      local still = {}
      for k, s in ipairs(left) do
        if not ((mem == nil or mem[k] == 1) and g[k] ~= 1) then still[#still + 1] = s end
      end
      left = still
    end
  end
  return left
end

-- pin (delta 1) or unpin (delta -1) the distinct samples of list in the bucket whose keys are
-- pk (bitmap) and pc (hash of the extra pins of samples pinned more than once)
local function add_pins(pk, pc, list, delta)
  if #list == 0 then return end
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
    local extra = chunked('HMGET', pc, nil, list, 1)
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

-- delete key (a bitmap of the bucket before, which no call sets bits in any more) once no bit
-- is set: the bitmaps of two buckets are held only while the older one still marks something
local function drop_if_empty(key)
  if redis.call('BITPOS', key, 1) == -1 then redis.call('DEL', key) end
end

-- the tier the caller's job can use for each sample of list (nil: none): the first tier (TIERS
-- order) that holds it, the augmented one only if the job has not used that copy. present:
-- the tiers that exist, when every sample of list is known to be in one of them (members of C):
-- the last of them then holds whatever the others do not, unread
local function usable_tiers(list, present)
  local tiers = present
  if not tiers then
    tiers = {}
    for _, t in ipairs(TIERS) do
      if redis.call('EXISTS', K.t[t]) == 1 then tiers[#tiers + 1] = t end
    end
  end
  local out, left = {}, {}  -- left: the positions in list still without a tier
  for k = 1, #list do left[k] = k end
  for p, t in ipairs(tiers) do
    if #left == 0 then break end
    if present and p == #tiers then
      for _, k in ipairs(left) do out[k] = t end
      break
    end
    local some = {}
    for m, k in ipairs(left) do some[m] = list[k] end
    local got = bits(K.t[t], some)
    if t == TIER.augmented and redis.call('EXISTS', K.g) == 1 then
      local copies, where = {}, {}  -- the job may not use an augmented copy it has used
      for m = 1, #some do
        if got[m] == 1 then copies[#copies + 1], where[#where + 1] = some[m], m end
      end
      local used = bits(K.g, copies)
      for x, m in ipairs(where) do
        if used[x] == 1 then got[m] = 0 end
      end
    end
    local rest = {}
    for m, k in ipairs(left) do
      if got[m] == 1 then out[k] = t else rest[#rest + 1] = k end
    end
    left = rest
  end
  return out
end

-- add a decision's samples served and hits per tier to the dataset's running totals (in used:
-- served, hits:<letter>) and the job's (j: total, hits), for operators (seneca cache status)
local function count_served(served, tiers)
  local per, all = {}, 0
  for k = 1, served do
    local t = tiers[k]
    if t then per[t], all = (per[t] or 0) + 1, all + 1 end
  end
  redis.call('HINCRBY', K.used, 'served', served)
  for t, h in pairs(per) do redis.call('HINCRBY', K.used, 'hits:' .. t, h) end
  redis.call('HINCRBY', K.j, 'total', served)
  redis.call('HINCRBY', K.j, 'hits', all)
end

-- pin every sample of the bitmap hitmap in the current bucket with whole-bitmap operations: a
-- few BITOPs cost less than a BITFIELD item per sample once a batch holds a few dozen samples
-- (a BITOP over a million samples costs about as much as 30 items). n: the dataset size
local function pin_bitmap(hitmap, n)
  if redis.call('EXISTS', K.pin) == 1 then
    redis.call('BITOP', 'AND', K.xg, K.pin, hitmap)  -- pinned already: one pin more each
    local again = listed(K.xg, n, {})
    redis.call('DEL', K.xg)
    for _, s in ipairs(again) do redis.call('HINCRBY', K.pinc, s, 1) end
    if #again > 0 then redis.call('PEXPIRE', K.pinc, 2 * PIN_LEASE) end
  end
  redis.call('BITOP', 'OR', K.pin, K.pin, hitmap)
  redis.call('PEXPIRE', K.pin, 2 * PIN_LEASE)
end

-- hand out the hits of a decision: the job has now used the augmented copies among them, they
-- are pinned in the current bucket, and the policy (a table of policies/) is told of them.
-- hitmap (optional): a bitmap of exactly the hits, pinned as a whole (n: the dataset size)
local function serve(picked, tiers, policy, hitmap, n)
  local out_tiers, augs, hits = {}, {}, {}
  for k, s in ipairs(picked) do
    local t = tiers[k]
    out_tiers[k] = t or ''
    if t then
      hits[#hits + 1] = s
      if t == TIER.augmented then augs[#augs + 1] = s end
    end
  end
  if hitmap and #augs == #picked and WHOLE * n < #augs then  -- the hits are the used copies
    redis.call('BITOP', 'OR', K.g, K.g, hitmap)
  else
    set_bits(K.g, augs, 1)
  end
  count_served(#picked, tiers)
  if #hits > 0 then
    if hitmap then pin_bitmap(hitmap, n) else add_pins(K.pin, K.pinc, hits, 1) end
    policy.served(hits)
  end
  return out_tiers
end

-- n, latest epoch, and served in epoch e (default: the latest); nil when the job is unknown
local function job_state(e)
  local h = redis.call('HMGET', K.j, 'n', 'epoch')
  if not h[1] then return nil end
  local latest = tonumber(h[2])
  e = e or latest
  local served = redis.call('HGET', K.j, 's' .. string.format('%d', e))
  return {n = tonumber(h[1]), epoch = e, latest = latest, served = tonumber(served or '0')}
end

-- the unserved bitmap of epoch e of a job whose latest epoch is latest (nil: long over)
local function rest_of(e, latest)
  if e == latest then return K.r end
  if e == latest - 1 then return K.p end
  return nil
end

-- make e the job's latest epoch: its unserved bitmap (K.r) moves to K.p when e follows it
local function advance(st, e)
  if e <= st.latest then return end
  if e == st.latest + 1 and redis.call('EXISTS', K.r) == 1 then
    redis.call('RENAME', K.r, K.p)
  else
    redis.call('DEL', K.r, K.p)
  end
  redis.call('HSET', K.j, 'epoch', e)
  redis.call('HDEL', K.j, 's' .. string.format('%d', e - 2))
end

-- fill K.r for a new epoch: the job's members, or all n samples (the bits past n in the last
-- byte are never read)
local function fill_rest(n)
  if redis.call('EXISTS', K.m) == 1 then
    redis.call('COPY', K.m, K.r, 'REPLACE')
  else
    redis.call('DEL', K.r)
    redis.call('SETBIT', K.r, n - 1, 0)
    redis.call('BITOP', 'NOT', K.r, K.r)
  end
end
