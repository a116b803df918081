"""Every default Seneca uses, in one place.

Sizes are in bytes, times in seconds. Change behaviour through the public options
(``SenecaLoader(...)``, CLI flags); this module only documents what you get when you don't.
The ODS sampler's and the cache metadata's defaults (key prefix, policy, leases) are in
``ods.defaults``; the MDP planner's in ``mdp.defaults``.
"""

from __future__ import annotations

#: Cache size used when ``cache_size`` is not given (embedded cache and budgets).
CACHE_SIZE = 1_000_000_000
#: Fractions of the cache given to the encoded / decoded / augmented tiers when ``split`` is not
#: given. ``mdp plan`` computes a better split for a given cluster.
SPLIT = {"encoded": 0.5, "decoded": 0.3, "augmented": 0.2}
#: ``split="auto"`` (the default): the loader plans its split with MDP from what it measures
#: (``seneca._autoplan``). Until a value has AUTO_WARMUP_SAMPLES samples behind it, it is taken
#: from AUTO_DEFAULTS (the CPU rates per process; ImageNet-like JPEGs of ~110 KB, decoded 5.1x
#: their size, cropped to 224 x 224), the rest from PROFILE_DEFAULTS or the user's spec.
AUTO_DEFAULTS = {
    "node.decode_augment_samples_per_s": 400.0,
    "node.augment_samples_per_s": 1000.0,
    "cache.bandwidth_gbit_per_s": 10.0,
    "storage.bandwidth_mbyte_per_s": 500.0,
    "dataset.sample_kb": 110.0,
    "dataset.inflation": 5.1,
    "dataset.augmented_ratio": 0.27,
}
AUTO_WARMUP_SAMPLES = 256
#: Samples per second per process a transform with no random head (nothing cached in the
#: augmented tier) is planned with for the work between a decoded hit and the cache boundary:
#: none, so any large number.
AUTO_NO_HEAD_RATE = 1_000_000.0
#: A split that caches more than the fewest samples is planned only when it is predicted to
#: beat that split by more than this fraction (about the model's error): filling a cache
#: (encoding and writing values on misses) costs what the model does not charge.
AUTO_MIN_GAIN = 0.02
#: The split changes only when the best split's predicted throughput beats the current one's
#: (both predicted from the same, latest inputs) by more than this fraction ...
AUTO_REPLAN_GAIN = 0.10
#: ... and the current plan is at least this old (a plan from defaults is replaced at once,
#: unless that would give up a warm tier) ...
AUTO_REPLAN_INTERVAL = 30.0
#: ... or a loader has measured this many times the samples the plan's inputs had behind them
#: (a plan made from a short measurement does not wait out the interval) ...
AUTO_EVIDENCE_FACTOR = 2
#: ... or the live jobs have differed from those it was planned for, the same number for this
#: long (a job that starts a validation pass or restarts does not move the split).
AUTO_JOBS_SETTLE = 10.0
#: A tier is warm when it holds at least this fraction of the cache: a plan that would evict
#: from a warm tier needs a gain above AUTO_REPLAN_GAIN predicted from measured rates (a plan
#: from defaults never empties a warm tier).
AUTO_WARM_SHARE = 0.05
#: Seconds between two looks at the shared plan by a loader (between batches).
AUTO_TICK = 2.0
#: ``shrink`` calls (each evicting at most ``ods.defaults.SHRINK_CHUNK`` entries per tier) a
#: loader makes per look while a tier holds more than its budget.
AUTO_SHRINK_CALLS = 16
#: Milliseconds the lock a loader takes to change the shared plan lasts at most.
AUTO_LOCK_MS = 5_000

#: Bytes charged per cached entry on top of what its value takes in the server's memory
#: (``ods.store.allocated``), for Redis' own per-key overhead.
ENTRY_OVERHEAD = 96
#: When the server refuses to store a value the budgets had room for, a loader's budgets
#: shrink to this fraction of what the tiers hold (``CachedDataset.cache_refused``).
REFUSED_SHRINK = 0.9
#: The room a cache node keeps beyond the tiers' budgets for each dataset on it
#: (``seneca._cache.shares``): the metadata of its N samples for up to ROOM_JOBS jobs:
#: (ROOM_JOBS + 4) x N / 8 bytes, plus ROOM_METADATA ...
ROOM_JOBS = 16
ROOM_METADATA = 1_000_000
#: ... and this fraction of its maxmemory for the server's own memory as it moves (clients'
#: reply buffers) beyond what it uses when the shares are computed.
NODE_HEADROOM = 0.02
#: A dataset whose tiers hold this fraction of its share has filled it: an idle dataset then
#: gives back the room it could use more (``seneca._cache.shares.allocate``).
SHARE_FULL = 0.9
#: A dataset's share that moves by more than this fraction is logged at INFO (smaller moves
#: follow the server's memory from look to look).
SHARE_LOGGED = 0.1
#: Samples a loader makes before it tells the node how much its dataset can use at most (from
#: their mean sizes: ``seneca.loader._budgets.most_useful``).
NEED_SAMPLES = 32

#: Socket timeouts of cache connections: connecting, and any wait of an operator's command
#: (``seneca cache ...``). A loader's connections wait at most ``ods.defaults.DEADLINE_CEILING``.
CONNECT_TIMEOUT = 0.25
SOCKET_TIMEOUT = 5.0
#: times a Redis Cluster client retries a command after a cluster error (a node down, MOVED)
CLUSTER_RETRIES = 2
#: After a failed cache call, a job reads from storage for CACHE_RETRY_FIRST seconds before it
#: tries the cache again; each retry that fails doubles the wait, up to CACHE_RETRY_CAP.
CACHE_RETRY_FIRST = 0.25
CACHE_RETRY_CAP = 4.0
#: Seconds a worker waits for the copies of its batch's promised samples (misses another job
#: was making when the batch was decided, at an epoch's end) before it makes them itself, and
#: between two looks for them
PROMISE_WAIT = 1.0
PROMISE_POLL = 0.01
#: A worker makes its batch's misses this many at a time and, while the cache is short of room
#: (``Fetcher._crowded``), swaps before each few those still to make for copies other jobs
#: cached since the batch was decided (``Fetcher._made_late``). With room, a swap only moves a
#: miss to a later batch (measured: with a quarter of the data cached, swapping whatever the
#: room ran 4-6% slower)
SWAP_EVERY = 8
#: Seconds a fetch looks again for decided values it found missing before it takes them for
#: gone: an admission makes its entries visible a round trip before their values are in place
#: (measured: every such value was there 1 ms later), and one evicted after its pin lapsed is
#: read from storage once this has passed. The looks are this far apart at first, twice as far
#: each time after
MISSING_WAIT = 0.008
MISSING_POLL = 0.0005
#: Environment variable that makes every SenecaLoader strict when its ``strict`` is not given:
#: "1", "true" or "yes" (any case).
STRICT_ENV = "SENECA_STRICT"
#: ``progress=True``: seconds between the progress lines a loader logs while an epoch runs.
PROGRESS_EVERY = 10.0

#: glibc malloc tuning in loader processes (``seneca.pipeline.malloc``): buffers below this many
#: bytes come from the heap and are reused instead of being mapped and page-faulted per use;
#: up to MALLOC_TRIM_THRESHOLD bytes of freed heap are kept. The environment variable
#: ``SENECA_MALLOC_TUNING=0`` turns it off.
MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
MALLOC_TRIM_THRESHOLD = 256 * 1024 * 1024

#: torch intra-op threads for the loader process's share of each batch while DataLoader workers
#: make the rest (``seneca.loader._ahead``): one, as each worker has.
LOADER_THREADS = 1

#: The thread that makes the loader process's share of the next batch (``seneca.loader._ahead``):
#: how long the end of a loop waits for it to stop before warning.
AHEAD_STOP_WAIT_S = 60.0
#: ... and how long a loop interrupted by an exception (Ctrl-C) waits for it: the thread may be
#: waiting on workers the same Ctrl-C stopped, and the user waits for the prompt.
AHEAD_INTERRUPT_WAIT_S = 0.1

#: Seconds a DataLoader worker's exit waits for its result queue to finish sending
#: (``seneca.loader._workers``).
WORKER_EXIT_WAIT_S = 2.0

#: How long the loop waits, once a worker's connection broke while it handed over a batch, for
#: DataLoader's SIGCHLD handler to name the worker that died, and how often it lets the handler
#: run meanwhile (``seneca.loader._workers``).
WORKER_LOSS_WAIT_S = 1.0
WORKER_LOSS_POLL_S = 0.01


#: Embedded cache: name of the shared server when ``cache=None``, and how often its watchdog
#: checks whether any user process is still alive.
EMBEDDED_NAME = "default"
EMBEDDED_POLL = 0.2
EMBEDDED_START_TIMEOUT = 10.0
#: Seconds the embedded cache outlives its last job (``$SENECA_CACHE_IDLE`` overrides it; 0:
#: it stops with the last job): the next job of a sweep run one after another finds it warm,
#: and a server nobody returns to goes by itself. Ten minutes, as sccache's server.
EMBEDDED_IDLE = 600.0
#: The embedded server's maxmemory is the cache size plus the dataset's metadata room
#: (``ROOM_*``) plus this much for the server's own memory (about 1 MB at start, then its
#: clients' buffers).
EMBEDDED_OWN_MEMORY = 16_000_000

#: Standalone cache node (``seneca cache-node``).
CACHE_NODE_PORT = 6379
CACHE_NODE_BIND = "127.0.0.1"

#: Synthetic dataset (``seneca make-dataset``).
DATASET_SIZE = (500, 375)
DATASET_QUALITY = 90
DATASET_SEED = 0

#: ``mdp profile``: seconds per measurement and images measured.
PROFILE_SECONDS = 2.0
PROFILE_SAMPLES = 200
#: ``mdp profile``: the crop size of the transform it times.
PROFILE_CROP = 224
#: ``mdp profile``: values it cannot measure on this machine, used unless ``--base`` gives them.
#: Node values are the Seneca paper's in-house server (Table 5); the model is ResNet-50
#: (25.6M fp32 parameters = 102.2 MB of gradients) at batch 256; one node with one GPU.
PROFILE_DEFAULTS = {
    "cluster.nodes": 1,
    "cluster.gpus_per_node": 1,
    "cluster.intra_node_nvlink": False,
    "cluster.inter_node_nvlink": False,
    "cluster.jobs": 1,
    "node.gpu_samples_per_s": 4550.0,
    "node.nic_gbit_per_s": 10.0,
    "node.pcie_gbyte_per_s": 32.0,
    "node.pipelined": True,
    "cache.size_gb": CACHE_SIZE / 1e9,
    "model.size_mb": 102.2,
    "model.batch_size": 256,
}

#: ``device=``: pinned host buffers a loader keeps per batch shape to copy batches to the device
#: from (``seneca.loader._device``): one being filled, one being copied, one spare.
STAGING_BUFFERS = 3

#: Batch tails (``seneca.pipeline.batch_tail``): how many recent output batches a loader keeps
#: to reuse once nobody holds them (0: a new tensor per batch).
BATCH_POOL = 4

#: A folder dataset's id in cache keys names each file's size (``seneca.pipeline.storage``): the
#: sizes are read one file at a time, unless the first ``STAT_PROBE`` files took over
#: ``STAT_SLOW_US`` microseconds each (a network file system: a round trip per file), then in
#: ``STAT_THREADS`` threads.
STAT_PROBE = 256
STAT_SLOW_US = 20.0
STAT_THREADS = 32
