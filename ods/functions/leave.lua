-- leave: forget the job and its state; it stops counting at once.
redis.call('ZREM', K.jobs, job)
redis.call('DEL', K.j, K.r, K.p, K.g, K.m)
forget_pace(job)
return 1
