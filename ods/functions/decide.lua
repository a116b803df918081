-- decide: the next batch of the job's epoch. Arguments: batch, lease (ms), seed, dataset size
-- n, substitute (0/1), policy, epoch ('' for the latest), spend copies first (0/1: under a
-- policy that does), jobs sampled for demand. With substitution, the batch is served
-- from C (the cached samples the job may use and has not been served) first, at random (under a
-- policy that spends copies first, those no sampled other job needs before the others:
-- substitute.lua's from_cache), and the
-- rest from its other unserved samples, at random: the same batches, in distribution,
-- as picking at random from all unserved samples and replacing each miss by a random member of
-- C while C lasts (the displaced misses stay unserved), without looking up or putting back the
-- misses a uniform pick would have drawn; with substitution, misses another job is making now
-- are put off while others are left (pending.lua), and promised when none is. Hits are pinned,
-- other misses marked pending. The decision is a tick of the jobs' pace (lib.lua's note_pace).
-- Returns epoch, served, substitutions, samples, tier letters ('' for storage, 'p' for a
-- promised miss), pin bucket.
local want, lease, n = tonumber(args[a]), tonumber(args[a + 1]), tonumber(args[a + 3])
local substitute, policy = args[a + 4] == '1', policy_of(args[a + 5])
local first, most = args[a + 7] == '1', tonumber(args[a + 8])
local choose = chooser(substitute and policy.spends and first, most)
if not choose then return fail('SENECA_JOBS') end
math.randomseed(tonumber(args[a + 2]))
local st = job_state(tonumber(args[a + 6] or ''))
if not st then return fail('SENECA_NOJOB', job) end
redis.call('ZADD', K.jobs, now + lease, job)
local bucket = math.floor(now / PIN_LEASE)
local U = rest_of(st.epoch, st.latest)
local left = st.n - st.served
if want > left then want = left end
if want <= 0 or not U or redis.call('EXISTS', U) == 0 then
  return {st.epoch, st.served, 0, {}, {}, bucket}
end
local taken, picked, tiers, subs, exact, cached = {}, {}, {}, 0, false, 0
if substitute then  -- exact: x:c holds exactly the picked hits, which have left U
  picked, tiers, subs, exact, cached = from_cache(U, want, n, left, taken, choose)
end
local backlog = (cached - #picked) / want  -- cached copies the job may use, left per sample asked
local still = exact and left - #picked or left  -- (in U)
local rest, gone = pick(U, want - #picked, n, still / n, taken, nil, true)
-- misses matter to other jobs only: a job alone neither puts off nor marks any (a batch of
-- hits alone asks nothing)
local shared = #rest > 0 and redis.call('ZCOUNT', K.jobs, now, '+inf') > 1
local forced = {}  -- pending misses taken because nothing else was left: promised
if substitute and shared then
  rest, gone, forced = put_off_pending(U, rest, gone, n, still, taken)
end
-- the samples still in U: C's unless they left it with a BITOP (exact), the rest's unless the
-- pick cleared them already
local clear = {}
if not exact then
  for k, i in ipairs(picked) do clear[k] = i end
end
if not gone then
  for _, i in ipairs(rest) do clear[#clear + 1] = i end
end
if not substitute then  -- a uniform pick: each sample's usable tier, if any
  picked, tiers = rest, usable_tiers(rest)
elseif #rest > 0 and #picked > 0 then  -- (each part alone is in random order already)
  for _, i in ipairs(rest) do picked[#picked + 1] = i end
  shuffle_together(picked, tiers)
elseif #rest > 0 then
  picked = rest  -- with substitution, the rest are misses: C held none of them
end
set_bits(U, clear, 0)  -- one call: the served samples still there leave U
local out_tiers = serve(picked, tiers, policy, exact and K.xc or nil, n)
if shared then
  -- misses another job is making now (left when nothing else was: the end of an epoch) are
  -- promised ('p'): the caller may wait for that job's copy (claim.lua) instead of making its own
  local misses = {}
  for k, i in ipairs(picked) do
    if forced[i] then
      out_tiers[k] = 'p'
    elseif not tiers[k] then
      misses[#misses + 1] = i
    end
  end
  mark_pending(misses)
end
if exact then redis.call('DEL', K.xc) end
redis.call('HINCRBY', K.j, 's' .. string.format('%d', st.epoch), #picked)
if subs > 0 then redis.call('HINCRBY', K.used, 'subs', subs) end
note_pace(backlog)
return {st.epoch, st.served + #picked, subs, picked, out_tiers, bucket}
