"""Every default ODS uses, in one place (times in seconds unless the name says ms)."""

from __future__ import annotations

#: Key prefix of everything Seneca writes into Redis (ODS metadata and cached values).
KEY_PREFIX = "seneca"
#: Cache policy: "seneca" (demand-aware eviction) or "paper" (evict after every live job's hit).
POLICY = "seneca"
#: A job not seen for this long stops counting as a live job of its dataset.
JOB_LEASE = 10.0
#: A job of one rank that starts a run under a name whose lease is live looks at the lease this
#: often until it runs out: renewed twice meanwhile, the name is another run's (JobInUseError).
RUN_CHECK_INTERVAL = 0.1
#: A job whose lease ran out this long ago leaves: its metadata is deleted by the next call of
#: any job of the dataset (a job that was only slow joins again and restores its epoch).
JOB_FORGET = 600.0
#: A decision's hits stay pinned (safe from eviction) this long unless released earlier.
PIN_LEASE = 60.0
#: Milliseconds a value staged for admission (SET before the call that admits it) lives if
#: nobody renames it into place.
STAGED_VALUE_TTL_MS = 60_000
#: Milliseconds an evicted entry's value may outlive it (its deleter's UNLINK on the way, or a
#: staged value renamed late): later its value is deleted by the next admit or release of any
#: job of the dataset. Longer than STAGED_VALUE_TTL_MS, so no rename can land after that.
ORPHAN_GRACE_MS = 65_000
#: Evicted entries whose grace has passed that one admit or release collects.
ORPHAN_COLLECT = 64
#: Eviction candidates an admission under pressure ("seneca" policy) considers per value it
#: offers: the unpinned entries of a random window of the tier, least needed first.
EVICTION_CANDIDATES = 16
#: ... and at most this many in one call per tier.
EVICTION_POOL = 2048
#: Values (at most) one ``admit`` call accounts: a larger admission is made in several calls,
#: one round trip each, so that no call holds the server's one thread for long (under eviction
#: pressure a value costs about 10-15 us of server time).
ADMIT_CHUNK = 64
#: Samples (at least) one ``decide`` call may serve: a larger batch is decided in several calls,
#: one round trip each, so that no call holds the server's one thread for long (a call costs
#: about 2-4 us of server time per sample, plus its operations over whole bitmaps) ...
DECIDE_CHUNK = 128
#: ... and one sample more per this many samples of the dataset, so that a call's work per
#: sample stays about that of its whole-bitmap operations (which grow with the dataset).
DECIDE_CHUNK_SAMPLES = 12_500
#: A dataset of more samples than this keeps its ODS metadata in shards of at most this many
#: samples, each a dataset of its own in its own hash slot (``ods.shards``; ``ods simulate
#: --shard-size``): a call then works on one shard, and its fixed part (its operations over
#: whole bitmaps) does not grow with the dataset. ImageNet-1k (1.28M) is one shard.
SHARD_SIZE = 1 << 21
#: Samples (at least) one ``decide`` call in a shard may serve: a batch of up to 1,024 is
#: decided in one call, as on one store at ImageNet-22k's size, so that jobs in step find the
#: copies the others just made few enough to list in one scan (smaller calls draw them by probes).
SHARD_DECIDE_CHUNK = 1_024
#: Entries (at most) one ``shrink`` call evicts from a tier above its budget.
SHRINK_CHUNK = 256
#: Live jobs (at most) over which an admission counts how much a sample is still needed (and a
#: decision, how much the other jobs need the cached samples it may serve).
DEMAND_JOBS = 4
#: A decision ("seneca" policy) serves first the cached copies none of the other live jobs
#: sampled for demand still needs, found among all of C with a few BITOPs, the rest at random;
#: False: all at random (the rule off, for comparison).
SPEND_FIRST = True
#: Batches the sampler decides per call while the cache covers the job.
LOOKAHEAD = 4
#: Times a call is made again after its functions were loaded or the live jobs refreshed.
CALL_RETRIES = 3
#: Deadlines of cache calls (``ods.routing.deadline``): a call whose server sends nothing for its
#: deadline is abandoned (its connection closed). The deadline is DEADLINE_FACTOR times the
#: slowest recent wait of that kind of call in the process (each older wait counting
#: DEADLINE_DECAY times less per call), within [DEADLINE_FLOOR, DEADLINE_CEILING]; a kind not
#: measured yet gets the ceiling. A loader's client waits at most DEADLINE_FLOOR on a socket
#: where no deadline is set (a new connection's handshake, calls not made through
#: ``ods.routing``).
DEADLINE_FLOOR = 0.2
DEADLINE_CEILING = 0.5
DEADLINE_FACTOR = 10.0
DEADLINE_DECAY = 0.9

#: seconds a data-parallel rank's saved place in an epoch stays in the cache (``Keys.place``):
#: as long as a checkpoint of a run is likely to be resumed from
PLACE_TTL = 7 * 24 * 3600
