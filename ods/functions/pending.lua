-- Pending misses (assembled after lib.lua; see ods/functions/__init__.py): samples a decision
-- served as misses, whose values the job is making from storage and has not offered to the
-- cache yet. Another job's decision puts them off while it has other samples to draw: a loader
-- with workers decides batches ahead, and two jobs that drew the same sample as a miss within
-- that lead would both read and decode it; put off, the sample comes later in the epoch, as a
-- hit on the copy the first job admits. pend:<b> holds the misses decided in pin-lease bucket
-- b (the current one and the one before are read); an offer clears them, and a bucket's key
-- expires after two leases, so the misses of a job that never offers lapse.

-- the pending bitmaps that exist
local function pending_keys()
  local out = {}
  for _, key in ipairs({K.pend, K.pend1}) do
    if redis.call('EXISTS', key) == 1 then out[#out + 1] = key end
  end
  return out
end

-- which of list are pending (a table by position: true)
local function pending_of(keys, list)
  local out = {}
  for _, key in ipairs(keys) do
    for k, b in ipairs(bits(key, list)) do
      if b == 1 then out[k] = true end
    end
  end
  return out
end

-- mark a decision's misses pending in the current bucket
local function mark_pending(misses)
  if #misses == 0 then return end
  set_bits(K.pend, misses, 1)
  redis.call('PEXPIRE', K.pend, 2 * PIN_LEASE)
end

-- the samples of list are offered: no longer pending
local function clear_pending(list)
  if #list == 0 then return end
  for _, key in ipairs(pending_keys()) do set_bits(key, list, 0) end
  if redis.call('EXISTS', K.pend1) == 1 then drop_if_empty(K.pend1) end
end

-- U's samples that no job is making and the caller has not taken: the scratch bitmap x:g
-- (U AND NOT the pending, as U XOR (U AND pending)); returns how many there are
local function not_pending(U, pend)
  if #pend == 1 then
    redis.call('BITOP', 'AND', K.xg, U, pend[1])
  else
    redis.call('BITOP', 'OR', K.xg, unpack(pend))
    redis.call('BITOP', 'AND', K.xg, K.xg, U)
  end
  redis.call('BITOP', 'XOR', K.xg, K.xg, U)
  return redis.call('BITCOUNT', K.xg)
end

-- rest: misses drawn from U (by pick; gone: they left U already), some of them pending. Those
-- are put off: the batch is filled with other samples of U while any is left, drawn again at
-- random (by probes twice, then from the exact set of U's samples no job is making, built with
-- a few BITOPs: the end of an epoch, where most of what is left is pending), and the put off
-- ones go back to U. Returns the misses, all of them out of U, and the pending ones among them
-- (taken because nothing else was left: a set).
local function put_off_pending(U, rest, gone, n, still, taken)
  local pend = pending_keys()
  if #pend == 0 or #rest == 0 then return rest, gone, {} end
  local want, out, off = #rest, {}, {}
  if not gone then set_bits(U, rest, 0) end
  for round = 1, 3 do
    local busy = pending_of(pend, rest)
    for k, s in ipairs(rest) do
      if busy[k] then off[#off + 1] = s else out[#out + 1] = s end
    end
    still = still - #rest
    if #out >= want or still <= 0 or round == 3 then break end
    local cleared
    rest, cleared = pick(U, want - #out, n, still / n, taken, nil, true)
    if not cleared then set_bits(U, rest, 0) end
    if #rest == 0 then break end
  end
  if #out < want and still > 0 then
    local free = not_pending(U, pend)
    if free > 0 then  -- (the probes may clear what they find in the scratch bitmap)
      local more = pick(K.xg, want - #out, n, free / n, taken, nil, true)
      set_bits(U, more, 0)
      for _, s in ipairs(more) do out[#out + 1] = s end
    end
    redis.call('DEL', K.xg)
  end
  local back, forced = {}, {}
  for _, s in ipairs(off) do
    if #out < want then out[#out + 1], forced[s] = s, true else back[#back + 1] = s end
  end
  set_bits(U, back, 1)  -- (also undoes the clearing of a taken bit by the probes)
  return out, true, forced
end
