"""What a SenecaLoader is wired to: its cache (URL or embedded, size, split into tier budgets)
and, with ODS, its sampler. Validation happens before anything connects, so a bad option is
reported before a server is started or a dataset scanned."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
import torch

from ods import defaults as ods_defaults
from ods import routing
from ods.routing import CACHE_FAILURES
from ods.sampler import OdsBatchSampler
from ods.shards import open_store, recorded_shard_size
from ods.store_api import Store
from seneca import defaults
from seneca._cache.client import CacheClient
from seneca._cache.embedded import acquire_embedded
from seneca._cache.shares import NodeShares, server_room
from seneca.loader._budgets import Budgets
from seneca.loader._options import group_device, parse_split
from seneca.loader.source import NotCacheable, Resolved, members
from seneca_base.backoff import Backoff
from seneca_base.errors import CacheUnavailableError, ConfigError
from seneca_base.split import Split
from seneca_base.units import parse_size

if TYPE_CHECKING:
    from seneca._autoplan import AutoPlanner

__all__ = [
    "CacheOptions",
    "CacheSetup",
    "TorchRanks",
    "auto_planner",
    "budgets_for",
    "cache_options",
    "cache_store",
    "connect",
    "ods_members",
    "ods_sampler",
    "seeds_from",
    "spec_values",
    "warn_unread",
]

log = logging.getLogger("seneca")

#: how long a socket of a loader's client waits when no deadline is set: a new connection's
#: handshake and the calls not made through ``ods.routing`` (each of those: its deadline)
_TIMEOUT = ods_defaults.DEADLINE_FLOOR


@dataclass(frozen=True)
class CacheOptions:
    """The cache options, validated: the client of a URL (None: the embedded cache), the size
    asked for or planned (None: the server's), the split (the first one planned, when
    ``auto``), and for ``auto`` the spec values given for what the loader cannot measure."""

    client: CacheClient | None
    size: int | None
    split: Split
    auto: bool = False
    spec: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CacheSetup:
    """A cache to use: its client, the split, whether it answered, and the size asked for
    (``want``: 0 for whatever the node gives)."""

    client: CacheClient
    split: Split
    reachable: bool
    want: int = 0
    #: the user gave ``cache_size`` (more than the node can give is then worth a warning)
    asked: bool = False

    @property
    def size(self) -> int:
        """The cache size planned for until the node's share is known: ``want``, or the
        default cache size."""
        return self.want or defaults.CACHE_SIZE

    @property
    def budgets(self) -> dict[str, int]:
        """Bytes per tier."""
        return self.split.budgets(self.size)


def cache_options(
    cache: str | None,
    cache_size: int | str | None,
    split: Mapping[str, float] | Sequence[float] | str | None,
    plan: str | os.PathLike | Mapping[str, Any] | None,
    spec: str | os.PathLike | None = None,
) -> CacheOptions:
    """Validate SenecaLoader's ``cache``, ``cache_size``, ``split``, ``plan`` and ``spec``."""
    size = parse_size(cache_size, "cache_size") if cache_size is not None else None
    auto = plan is None and (split is None or (isinstance(split, str) and split == "auto"))
    if isinstance(split, str) and not auto:
        raise ConfigError(f"split: expected 'auto', a mapping or an (e, d, a) tuple, got {split!r}")
    if spec is not None and not auto:
        raise ConfigError("spec= is what split='auto' plans with: not with plan= or a split")
    base = spec_values(spec) if spec is not None else None
    if plan is not None:
        if split is not None:
            raise ConfigError("give either plan= or split=, not both")
        from mdp.planfile import load_plan  # mdp loads on first use, as for spec=

        chosen = load_plan(plan)
        fractions, size = chosen.split, size or chosen.cache_bytes
    else:
        fractions = parse_split(None if auto else split)
    client = CacheClient(cache, _TIMEOUT) if cache is not None else None
    return CacheOptions(client, size, fractions, auto, base)


def spec_values(spec: str | os.PathLike) -> dict[str, Any]:
    """The values (``section.key``) of a cluster spec file, for what the loader cannot measure."""
    from mdp.spec import FIELDS, load_spec

    if not isinstance(spec, str | os.PathLike):
        raise ConfigError(f"spec: expected the path of a cluster spec (TOML), got {spec!r}")
    loaded = load_spec(spec)
    return {f.name: loaded.get(f.name) for f in FIELDS}


def auto_planner(
    setup: CacheSetup,
    store: Store,
    job: str,
    counters: Any,
    workers: int,
    base: Any,
    tiers: tuple[str, ...],
    about: Any = None,
    backoff: Backoff | None = None,
) -> AutoPlanner:
    """The planner of a loader with ``split="auto"`` whose jobs read ``tiers``, started on the
    dataset's plan (or the first one) when the cache answers; the store's budgets follow its
    split. ``about``: the user's dataset (named in the plan's log lines); ``backoff``: the
    job's back-off of the cache (no look during an outage)."""
    from seneca._autoplan import AutoPlanner, Setting

    local = setup.client.local
    setting = Setting(store.samples, setup.size, max(0, workers), local, dict(base or {}), tiers)
    planner = AutoPlanner(store, job, counters, setting, describe(about), backoff)
    if setup.reachable:
        try:
            planner.start()
        except CACHE_FAILURES as err:
            log.debug("no plan yet: %s", err)
    store.apply_split(planner.split, setup.size)
    return planner


def connect(
    options: CacheOptions, samples: int, strict: bool = False, dataset: str = ""
) -> CacheSetup:
    """Start or join the embedded cache when no URL was given (sized for ``cache_size`` and
    the metadata of ``dataset``'s ``samples`` samples), then check that the cache answers. An
    unreachable cache warns once (training reads from storage), or raises
    CacheUnavailableError when ``strict``. What the tiers get is the dataset's share of the
    node (``seneca.loader._budgets``)."""
    want, client = options.size or 0, options.client
    if client is None:  # sized so that its tiers get ``want``
        want = want or defaults.CACHE_SIZE
        url = acquire_embedded(want, room=server_room(want, samples), key=dataset)
        client = CacheClient(url, _TIMEOUT)
    asked = options.size is not None
    try:
        client.ping()
    except CacheUnavailableError as err:
        if strict:
            raise
        log.warning("%s; training reads from storage", err)
        return CacheSetup(client, options.split, False, want, asked)
    return CacheSetup(client, options.split, True, want, asked)


def budgets_for(
    setup: CacheSetup,
    store: Store,
    job: str,
    planner: AutoPlanner | None,
    tiers: tuple[str, ...],
    counters: Any,
    about: Any = None,
    backoff: Backoff | None = None,
    flight: int = 0,
) -> Budgets:
    """The budgets of ``store``'s tiers (published as ``job``'s), started: the dataset's share
    of the node (when the cache answers) split by ``planner``'s plan, else by the split given;
    ``tiers``: those the loader reads, ``counters``: its counters (the sizes of its samples),
    ``about``: the user's dataset (named in log lines), ``backoff``: the job's back-off of the
    cache, ``flight``: the samples the job's processes may have in flight at once."""
    shares = NodeShares(setup.client) if setup.reachable else None
    budgets = Budgets(
        store,
        shares,
        setup.want,
        setup.split,
        planner,
        tiers,
        counters,
        asked=setup.asked,
        about=describe(about),
        backoff=backoff,
        job=job,
        flight=flight,
    )
    try:
        budgets.start()
    except CACHE_FAILURES as err:
        log.debug("no share of the node yet: %s", err)
    return budgets


def ods_members(
    dataset: Any, resolved: Resolved, use_ods: bool, ods: bool | None
) -> tuple[bool, Sequence[int] | None]:
    """Whether ODS can serve ``resolved`` (a subset that repeats samples: not, which is an
    error only when ``ods=True`` asked for it), and the samples it serves (None: all)."""
    if not use_ods:
        return False, None
    try:
        return True, members(resolved)
    except NotCacheable as why:
        if ods:
            raise ConfigError(f"ods=True: {type(dataset).__name__}: {why}") from None
        return False, None


def warn_unread(split: Split, tiers: Sequence[str]) -> None:
    """Warn when a fixed ``split`` gives a share to a tier the loader's jobs never read (not
    in ``tiers``): a transform with no random head has no augmented copies, a dataset whose
    files are not what it decodes no encoded values."""
    unread = [t for t, f in split.fractions.items() if f > 0 and t not in tiers]
    if unread:
        warnings.warn(
            f"split: {', '.join(unread)} gets a share of the cache that this loader never "
            f"reads (it reads {', '.join(tiers)}; see docs/guide.md, 'Where caching stops in "
            "the transform')",
            RuntimeWarning,
            stacklevel=4,
        )


def data_parallel() -> tuple[int, int]:
    """(world size, rank) of an initialised torch.distributed group, else (1, 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def describe(dataset: Any) -> str:
    """What ``dataset`` is, in a few words, for operators: its class, and its root if any."""
    if dataset is None:
        return "unknown"
    root = getattr(dataset, "root", None)
    name = type(dataset).__name__
    return f"{name} {root}" if isinstance(root, str | os.PathLike) else name


def cache_store(
    setup: CacheSetup, dataset: str, view: str, samples: int, about: Any = None
) -> Store:
    """The cache engine of ``dataset`` (an id of its files and decoder) seen through ``view``
    (its transform's) on ``setup``'s cache, its functions loaded when the cache answers: an
    ACL user that may not load or call them is a ConfigError. ``about``: the user's dataset,
    described in the cache for operators."""
    shard_size = None  # unknown: the default's (the cache fails: the loader reads around it)
    if setup.reachable:  # a dataset kept in shards stays in the shards its first loader made
        with contextlib.suppress(*CACHE_FAILURES):
            shard_size = recorded_shard_size(setup.client, dataset)
    store = open_store(
        setup.client,
        dataset,
        samples,
        shard_size,
        view=view,
        policy=ods_defaults.POLICY,
        capacity=setup.budgets,
        values=True,
        overhead=defaults.ENTRY_OVERHEAD,
    )
    if setup.reachable:
        try:
            store.state()  # a function call (loading the functions when missing)
            store.register(describe(about))
        except redis.exceptions.NoPermissionError as e:
            raise ConfigError(
                f"cache: {setup.client.redacted} denies a command Seneca needs: {e}"
            ) from None
        except routing.OUTAGES as e:  # gone since the ping, or refusing (a replica, a cluster
            # that lost slots): the fetches and the sampler read around it as any outage
            log.warning(
                "cache %s cannot serve now (%s): reading from storage", setup.client.redacted, e
            )
    return store


#: what iterating a SenecaLoader's batch sampler outside the loader raises
FOREIGN_ITERATION = (
    "SenecaLoader: its batch sampler was iterated outside the loader, as by another loader "
    "made from its attributes (Accelerate's prepare() makes one), which would read the "
    "dataset around the cache and leave the cache's decisions unfetched. Iterate the "
    "SenecaLoader itself: with Accelerate, leave it out of prepare() and give it "
    'device=accelerator.device (docs/guide.md, "Training frameworks")'
)


def ods_sampler(
    store: Store,
    job: str,
    batch_size: int,
    drop_last: bool,
    indices: Sequence[int] | None = None,
    seeds: Callable[[], int] | None = None,
    on_start: Callable[[], None] | None = None,
    strict: bool = False,
    backoff: Backoff | None = None,
    held_here: Callable[[str], bool] | None = None,
) -> OdsBatchSampler:
    """The ODS batch sampler of ``job`` over ``store`` (``indices``: the samples it trains on),
    for this rank; ``seeds`` gives each epoch's seed; ``on_start`` is called at each epoch's
    start, the job registered, before its first decision; ``strict`` and ``backoff``: what a
    failure of the cache does (the job's back-off, shared with its fetches); ``held_here``:
    whether a loader of this process holds a job (its new run takes the name over)."""
    replicas, rank = data_parallel()
    return OdsBatchSampler(
        store,
        job,
        batch_size,
        drop_last,
        indices=indices,
        num_replicas=replicas,
        rank=rank,
        seeds=seeds,
        on_start=on_start,
        strict=strict,
        backoff=backoff,
        ranks=TorchRanks() if replicas > 1 else None,
        held_here=held_here,
        foreign=FOREIGN_ITERATION,
    )


def seeds_from(generator: torch.Generator | None) -> Callable[[], int]:
    """Seeds for ODS's random choices, drawn from ``generator`` (None: torch's global random
    state), as RandomSampler draws its own."""

    def draw() -> int:
        return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())

    return draw


class TorchRanks:
    """The ranks of a torch.distributed job (:class:`ods.sampler.Ranks`): gloo/NCCL
    collectives over the default group."""

    def __init__(self) -> None:
        #: the latest reduced tensor, held: torch 2.6's gloo frees a finished reduce's tensors
        #: in its own thread, which needs the GIL for the last reference, and
        #: ``destroy_process_group`` joins that thread holding the GIL
        self.reduced: Any = None

    def union(self, bitmap: bytes) -> bytes:
        """The bitwise OR of every rank's ``bitmap`` (equal lengths)."""
        import numpy as np
        import torch.distributed as dist

        bits = torch.from_numpy(np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8)).copy())
        bits = bits.to(group_device())
        dist.all_reduce(bits, op=dist.ReduceOp.MAX)
        self.reduced = bits
        return np.packbits(bits.cpu().numpy()).tobytes()

    def barrier(self) -> None:
        """Return once every rank has called it."""
        import torch.distributed as dist

        dist.barrier()
