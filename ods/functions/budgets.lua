-- budgets: write the tiers' budgets in force where every process of the dataset reads them
-- (OdsStore.budgets_command). Arguments: field, value, ... A function (flagged allow-oom, as
-- every one is) and not a plain HSET, which a server out of memory refuses: the smaller budgets
-- that a write refused for want of memory asks for must reach the other processes then most.
redis.call('HSET', K.info, unpack(args, a))
return 1
