-- epoch: start epoch e unless the job (another rank) already did. Arguments: e, dataset size n.
-- Returns e and what the job has served in it.
local e, n = tonumber(args[a]), tonumber(args[a + 1])
local st = job_state(e)
if not st then return fail('SENECA_NOJOB', job) end
if e > st.latest then
  advance(st, e)
  fill_rest(n)
  redis.call('HSET', K.j, 's' .. string.format('%d', e), 0)
  return {e, 0}
end
if e < st.latest - 1 then return {e, st.n} end  -- long over: nothing left to serve
return {e, st.served}
