-- budgets: the tiers' budgets in force, where every process of the dataset reads them
-- (OdsStore.budgets_command). Arguments: mode, then
--   'set', version ('' for none), field, value, ...: write the budgets, unless those in force
--     came from a later plan (a higher version): a job still on an older plan must not put
--     its budgets back in force;
--   'fit', total, field, ...: shrink the budgets in force of the fields, in their proportions,
--     so that they hold at most total together (the server refused writes for want of memory;
--     a process whose view of the budgets is stale shrinks those in force, not its own).
-- Returns the fields' values in force after the call. A function (flagged allow-oom, as every
-- one is) and not a plain HSET, which a server out of memory refuses: the smaller budgets that
-- a write refused for want of memory asks for must reach the other processes then most.
local mode = args[a]
local fields = {}
if mode == 'set' then
  local version = args[a + 1]
  local now = tonumber(redis.call('HGET', K.info, BUDGET_VERSION) or '')
  local write = version == '' or not now or tonumber(version) >= now
  for k = a + 2, #args, 2 do fields[#fields + 1] = args[k] end
  if write then
    redis.call('HSET', K.info, unpack(args, a + 2))
    if version ~= '' then redis.call('HSET', K.info, BUDGET_VERSION, version) end
  end
else  -- 'fit'
  local total = tonumber(args[a + 1])
  for k = a + 2, #args do fields[#fields + 1] = args[k] end
  local now = redis.call('HMGET', K.info, unpack(fields))
  local held = 0
  for k = 1, #fields do held = held + (tonumber(now[k]) or 0) end
  if held > total then
    local out = {}
    for k = 1, #fields do
      out[2 * k - 1], out[2 * k] = fields[k], math.floor((tonumber(now[k]) or 0) * total / held)
    end
    redis.call('HSET', K.info, unpack(out))
  end
end
return redis.call('HMGET', K.info, unpack(fields))
