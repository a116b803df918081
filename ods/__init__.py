"""ODS: the opportunistic data sampler of the Seneca paper (§5.2) and its Redis metadata.
No torch: the store and the simulator need only redis-py.

Several jobs share one dataset and one cache. When a job asks for a batch, ODS picks random
samples the job has not seen this epoch and replaces the ones that miss the cache with cached
samples the job has not seen; the displaced misses stay pending for a later batch. Every
decision is one atomic Lua call (:class:`OdsStore`)::

    store = OdsStore(redis_client, dataset_id, samples, capacity={"encoded": 200_000})
    store.join("job-1")
    store.start_epoch("job-1", 0)
    d = store.decide("job-1", 256)      # d.indices, d.tiers (None: read storage)
    ...fetch...
    store.release("job-1", d)           # the fetch is done: its hits may be evicted
    store.admit("job-1", [(i, "encoded", size, value), ...])

Command line: ``ods simulate`` (``seneca._cli.ods``): a run's schedule (``ods.schedule``), its
ceiling (``ods.ceiling``: the fewest storage loads any policy can make) and its loads by cause
(``ods.losses``). Defaults: ``ods.defaults``.
"""

from ods.ceiling import Ceiling
from ods.decision import Pick
from ods.sampler import OdsBatchSampler
from ods.schedule import Step
from ods.simulate import BASELINES, SimConfig, simulate_baseline, simulate_ods
from ods.store import POLICIES, Decision, OdsStore

__all__ = [
    "BASELINES",
    "POLICIES",
    "Ceiling",
    "Decision",
    "OdsBatchSampler",
    "OdsStore",
    "Pick",
    "SimConfig",
    "Step",
    "simulate_baseline",
    "simulate_ods",
]
