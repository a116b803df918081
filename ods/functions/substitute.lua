-- Substitution helpers of decide (assembled after lib.lua; see ods/functions/__init__.py): C,
-- the cached samples a job may be served instead of its misses, and draws from it.

-- the samples of C = (encoded | decoded | (augmented & ~used by the job)) & U, from the bitmaps
-- that exist, in the scratch bitmap x:c; returns its length in bytes (0: none) and the tiers
-- (letters, in TIERS order) that hold any
local function cached_unserved(U)
  local parts, present = {}, {}
  for _, t in ipairs(TIERS) do
    if redis.call('EXISTS', K.t[t]) == 1 then
      present[#present + 1] = t
      if t == TIER.augmented and redis.call('EXISTS', K.g) == 1 then
        -- a & ~g as a ^ (a & g): NOT g would end where g ends (a shorter g than a would hide
        -- every copy past its end)
        redis.call('BITOP', 'AND', K.xg, K.t[TIER.augmented], K.g)
        redis.call('BITOP', 'XOR', K.xg, K.xg, K.t[TIER.augmented])
        parts[#parts + 1] = K.xg
      else
        parts[#parts + 1] = K.t[t]
      end
    end
  end
  if #parts == 0 then return 0, present end
  local len
  if #parts == 1 then
    len = redis.call('BITOP', 'AND', K.xc, parts[1], U)
  else
    redis.call('BITOP', 'OR', K.xc, unpack(parts))
    len = redis.call('BITOP', 'AND', K.xc, K.xc, U)
  end
  redis.call('DEL', K.xg)
  return len, present
end

-- how many samples x:c (of len bytes) holds and, when that is at most twice want, all of them
-- in order: listing C costs one call per member, drawing from it by random probes about two
-- per member drawn. A C that looks small in a window of 1/64 of its bytes (placed by how many
-- samples the job has left, not by the random numbers: a seeded job draws the same numbers
-- whatever the cache holds) is listed without counting it over its whole bitmap (a BITCOUNT:
-- C code, but at 14M samples about 0.7 ms); any other is counted first, and listed only when
-- it is small enough: a listing cut short at twice want (C was larger than it looked) is work
-- wasted, which made the slowest decisions when C held about twice a batch.
local function count_c(len, n, want, left)
  if len == 0 then return 0, nil end
  local w = math.max(1, math.floor(len / 64))
  local from = (left * 40503) % (len - w + 1)
  if redis.call('BITCOUNT', K.xc, from, from + w - 1) * len / w <= want then
    local list = listed(K.xc, n, {}, 2 * want + 1)
    if #list <= 2 * want then return #list, list end
  end
  local total = redis.call('BITCOUNT', K.xc)
  if total <= 2 * want then return total, listed(K.xc, n, {}, total) end
  return total, nil
end

-- how many of want samples drawn at random from u samples without replacement are among the c
-- of C: the hits a uniform pick would have found (the rest of the hits served replace misses)
local function natural_hits(want, c, u)
  local h, random = 0, math.random
  for k = 0, want - 1 do
    if c - h <= 0 then break end
    if random() * (u - k) < c - h then h = h + 1 end
  end
  return h
end

-- shuffle list and its tiers (a table by position; nil: storage) together
local function shuffle_together(list, tiers)
  local random = math.random
  for k = #list, 2, -1 do
    local m = random(1, k)
    list[k], list[m] = list[m], list[k]
    tiers[k], tiers[m] = tiers[m], tiers[k]
  end
end

-- x:g := the samples of C (x:c) that none of the other live jobs sampled for demand still needs
-- this epoch (their bits unset in each one's r), with a few operations over whole bitmaps (a
-- shard's, or a dataset's of a few million samples); returns how many (nil: no job to ask, x:g
-- not made). (Augmented copies: a job that used the copy needs it no more, but counts here;
-- those are left to the rest.)
local function unneeded_bitmap(choose)
  local jobs = demand_jobs(TIER.encoded, choose.others, choose.most)
  if #jobs == 0 then return nil end
  local rs = {}
  for k, j in ipairs(jobs) do rs[k] = j.r end
  redis.call('BITOP', 'OR', K.xg, unpack(rs))
  -- C & ~needed as C ^ (C & needed): NOT would end where the needed bitmap ends
  redis.call('BITOP', 'AND', K.xg, K.xg, K.xc)
  redis.call('BITOP', 'XOR', K.xg, K.xg, K.xc)
  return redis.call('BITCOUNT', K.xg)
end

-- up to want of those (unneeded_bitmap), drawn at random, added to taken: the copies chosen_of
-- would put first, found among all of C instead of among per x want candidates, each of which
-- costs a probe and a read of every sampled job's bit
local function unneeded(want, n, taken, choose)
  local zeros = unneeded_bitmap(choose)
  local out = {}
  if zeros and zeros > 0 then out = pick(K.xg, want, n, zeros / n, taken, nil, true) end
  redis.call('DEL', K.xg)
  return out
end

-- of list (all of C, listed), want: the ones no sampled job needs first (unneeded_bitmap, one
-- bit read per member), then the others, each kind at random; added to taken. Returns them, in
-- random order, and the members left.
local function spare_first(list, want, taken, choose)
  local zero = {}
  if unneeded_bitmap(choose) then
    for k, b in ipairs(bits(K.xg, list)) do
      if b == 1 then zero[list[k]] = true end
    end
  end
  redis.call('DEL', K.xg)
  local first, second = {}, {}
  for _, i in ipairs(draw(list, #list, {})) do  -- (a shuffle)
    if zero[i] then first[#first + 1] = i else second[#second + 1] = i end
  end
  for _, i in ipairs(second) do first[#first + 1] = i end
  local chosen, others = {}, {}
  for k, i in ipairs(first) do
    if k <= want then
      chosen[k] = i
      taken[i] = true
    else
      others[#others + 1] = i
    end
  end
  return chosen, others
end

-- want samples of C (x:c, holding total) at random, added to taken (all of C when it holds
-- fewer), with their tiers; when spend, first the ones no sampled other job needs (unneeded).
-- When the dataset is small enough for the operations over whole bitmaps here and in
-- pin_bitmap (about 8) to cost less than the bits of the chosen samples in U and the pins (2
-- each), x:c is cut to exactly the chosen samples and U loses them in one BITOP (returns true:
-- the caller pins them with x:c); else x:c is deleted
local function probe_c(U, want, n, total, present, taken, choose, spend)
  local whole = 8 * WHOLE * n < 2 * want
  local spare = spend and unneeded(want, n, taken, choose) or {}
  local rest = want - #spare
  if rest <= 0 then  -- enough copies no sampled job needs: those
    redis.call('DEL', K.xc)
    if whole then  -- x:c holds exactly them, and U loses them in one BITOP
      set_bits(K.xc, spare, 1)
      redis.call('BITOP', 'XOR', U, U, K.xc)
    end
    return spare, usable_tiers(spare, present), whole
  end
  if whole then redis.call('COPY', K.xc, K.xg, 'REPLACE') end
  local drawn, cleared = pick(K.xc, rest, n, total / n, taken, nil, true)
  local chosen, tiers = spare, usable_tiers(spare, present)  -- the spare ones first
  for k, t in pairs(usable_tiers(drawn, present)) do tiers[#spare + k] = t end
  for _, i in ipairs(drawn) do chosen[#chosen + 1] = i end
  if not whole then
    redis.call('DEL', K.xc)  -- fewer than want chosen: all of C was (pick clears what it finds)
    return chosen, tiers, false
  end
  if not cleared then set_bits(K.xc, drawn, 0) end
  redis.call('BITOP', 'XOR', K.xc, K.xc, K.xg)  -- C xor (C less the drawn): the drawn
  redis.call('DEL', K.xg)
  if #spare > 0 then set_bits(K.xc, spare, 1) end  -- (drawn from x:g: still in x:c)
  redis.call('BITOP', 'XOR', U, U, K.xc)  -- (x:c is a subset of U)
  return chosen, tiers, true
end

-- up to want samples of C, added to taken (all of C when it holds fewer), with the tier of
-- each, the substitutions they count for, whether x:c holds exactly them (then they have
-- left U already) and how many samples C held. Under a policy that spends copies first (choose.spends), the ones no
-- sampled other job needs come first (unneeded_bitmap), the rest at random. When C holds at most twice want samples all of
-- them are listed in one ordered scan and drawn from, the ones not chosen cleared in x:c, and U
-- loses the chosen ones in one BITOP (cheaper than a bit each: a BITOP over the bitmap costs
-- about as much as 30 bits at a million samples); x:c is then left for the caller (to pin
-- them) to delete. Else random probes (probe_c).
local function from_cache(U, want, n, left, taken, choose)
  local len, present = cached_unserved(U)
  local total, list = count_c(len, n, want, left)
  if total == 0 then
    redis.call('DEL', K.xc)
    return {}, {}, 0, false, 0
  end
  local spend = choose.spends and total > want
  local chosen, tiers, exact = nil, nil, list ~= nil
  if list then
    local others
    if spend then
      chosen, others = spare_first(list, want, taken, choose)
    else
      chosen, others = draw(list, want, taken), {}
      for k = #chosen + 1, #list do others[#others + 1] = list[k] end  -- (draw moved the drawn first)
    end
    tiers = usable_tiers(chosen, present)
    if spend then shuffle_together(chosen, tiers) end
    set_bits(K.xc, others, 0)
    redis.call('BITOP', 'XOR', U, U, K.xc)  -- (x:c is a subset of U)
  else
    chosen, tiers, exact = probe_c(U, want, n, total, present, taken, choose, spend)
  end
  return chosen, tiers, #chosen - natural_hits(want, total, left), exact, total
end

-- how a call chooses among C's samples (from_cache's choose): spends, whether copies the other
-- live jobs need least go first (a job alone has no other jobs' needs to weigh), most: the jobs
-- sampled for demand. nil when the declared jobs are stale (read before anything is written)
local function chooser(spends, most)
  local choose = {spends = spends, most = most, others = {}}
  if spends then
    local live = live_declared()
    if not live then return nil end
    for _, j in ipairs(live) do
      if j.name ~= job then choose.others[#choose.others + 1] = j end
    end
    choose.spends = #choose.others > 0
  end
  return choose
end
