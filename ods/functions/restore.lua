-- restore: continue epoch e with every sample not set in the bitmap 'consumed' (a job
-- restarted from a checkpoint). Arguments: e, dataset size n, consumed. Returns e, served.
local e, n, consumed = tonumber(args[a]), tonumber(args[a + 1]), args[a + 2]
local st = job_state(e)
if not st then return fail('SENECA_NOJOB', job) end
advance(st, e)
local rest = rest_of(e, math.max(e, st.latest))
if not rest then return {e, st.n} end
redis.call('SET', K.xc, consumed)
redis.call('SETBIT', K.xc, n - 1, bit1(K.xc, n - 1) and 1 or 0)  -- at least n bits long
redis.call('BITOP', 'NOT', rest, K.xc)
if redis.call('EXISTS', K.m) == 1 then redis.call('BITOP', 'AND', rest, rest, K.m) end
local served = redis.call('BITCOUNT', K.xc)
redis.call('DEL', K.xc)
redis.call('HSET', K.j, 's' .. string.format('%d', e), served)
return {e, served}
