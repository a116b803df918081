"""One node, one budget: the datasets on a cache node share its memory under one rule.

Every loader registers its dataset in the node's record (``ods.keys.Keys.node``): the bytes it
asks for (``cache_size``; 0: whatever the node gives), the bytes its dataset can use at most
(every sample in its largest readable forms, once measured or planned) and its samples (for
the metadata it may grow to). Any loader computes every dataset's share from that record and
the node's memory, the same way (:func:`allocate`):

* the node gives the tiers of all datasets together :meth:`NodeShares.total`: its
  ``maxmemory``, less what is not a tier's value (the server's own memory, the metadata,
  any foreign data: ``used_memory`` less the tiers' bytes), less the room each registered
  dataset's metadata may grow to (``seneca.defaults.ROOM_*``), the room the batches of its
  live jobs take in flight (the values a batch reads or writes sit in the server's client
  buffers meanwhile: a batch per process of each job, once its samples' sizes are measured)
  and a headroom (``defaults.NODE_HEADROOM``);
* a dataset with no live job (and no loader registered within a lease) keeps what it holds
  (the next job of a sweep finds it warm) until a dataset with live jobs that has filled its
  share could use more: then the least recently used give it back first;
* the datasets with live jobs split the rest by max-min fairness over what each asks and can
  use: no dataset gets more than that, and none is cut while another gets more than it.

The shares sum to at most the node's total, so a write the budgets allow fits in the server's
memory. A dataset's share is split into tier budgets by its split (``OdsStore.apply_split``)
and published where every process reads them (``OdsStore.publish_budgets``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from ods import defaults as ods_defaults
from ods.keys import Keys
from ods.routing import CACHE_FAILURES, client_of
from ods.shards import open_store, part_names, recorded_shard_size
from seneca import defaults
from seneca._cache.client import server_ms, text_of
from seneca_base.errors import SenecaError
from seneca_base.tiers import LETTER, TIERS

__all__ = ["Claim", "NodeShares", "allocate", "metadata_room", "server_room", "waterfill"]

log = logging.getLogger("seneca")

#: the job name a node-level shrink of an idle dataset calls the engine as
_UPKEEP = "seneca-node"


def metadata_room(samples: int) -> int:
    """Bytes the metadata of a dataset of ``samples`` samples may grow to (``defaults.ROOM_*``):
    (ROOM_JOBS + 4) x N / 8 + ROOM_METADATA."""
    return (defaults.ROOM_JOBS + 4) * int(samples) // 8 + defaults.ROOM_METADATA


def server_room(size: int, samples: int) -> int:
    """Bytes a server needs beyond ``size`` bytes of tiers for one dataset of ``samples``
    samples, so that :meth:`NodeShares.total` gives the tiers ``size``: the server's own
    memory (``defaults.EMBEDDED_OWN_MEMORY``), the metadata's room and the headroom."""
    room = defaults.EMBEDDED_OWN_MEMORY + metadata_room(samples)
    headroom = defaults.NODE_HEADROOM
    return room + int(headroom * (size + room) / (1 - headroom))


@dataclass(frozen=True)
class Claim:
    """What one dataset asks of a node: ``want`` bytes (0: whatever the node gives), ``need``
    bytes at most it can use (0: not known), whether it has live jobs (``active``), the bytes
    its tiers ``held`` now, when a loader of it last registered (``seen``, ms), its
    ``samples`` (for the room its metadata may grow to) and the bytes its live jobs' batches
    have in ``flight`` at most, all together."""

    want: int
    need: int = 0
    active: bool = True
    held: int = 0
    seen: int = 0
    samples: int = 0
    flight: int = 0

    def cap(self, total: int) -> int:
        """The most this dataset is given of a node of ``total`` bytes."""
        caps = [c for c in (self.want, self.need) if c > 0]
        return min([total, *caps])


def waterfill(total: int, caps: Mapping[str, int]) -> dict[str, int]:
    """``total`` split by max-min fairness over ``caps``: each gets its cap or an equal share
    of what the smaller caps left, whichever is less."""
    out: dict[str, int] = {}
    left, names = max(0, int(total)), sorted(caps, key=lambda d: (caps[d], d))
    for k, name in enumerate(names):
        even = left // (len(names) - k)
        out[name] = min(int(caps[name]), even)
        left -= out[name]
    return out


def allocate(total: int, claims: Mapping[str, Claim]) -> dict[str, int]:
    """Every dataset's share of a node whose tiers may hold ``total`` bytes (see the module's
    docstring): the active datasets split what the idle ones do not hold by :func:`waterfill`;
    an idle dataset keeps what it holds until an active one that has (nearly) filled its share
    (``defaults.SHARE_FULL``) could use more: then the least recently seen give first, as much
    as those could use."""
    active = {d: c for d, c in claims.items() if c.active}
    kept = {d: c.held for d, c in claims.items() if not c.active}
    caps = {d: c.cap(total) for d, c in active.items()}
    shares = waterfill(total - sum(kept.values()), caps)
    full = defaults.SHARE_FULL
    deficit = sum(
        caps[d] - shares[d] for d, c in active.items() if c.held >= full * shares[d] < caps[d]
    )
    for d in sorted(kept, key=lambda d: claims[d].seen):
        if deficit <= 0:
            break
        give = min(kept[d], deficit)
        kept[d] -= give
        deficit -= give
    return {**kept, **waterfill(total - sum(kept.values()), caps)}


class NodeShares:
    """The shares of the node ``client`` talks to among the datasets registered on it under
    ``prefix``. ``client``: a redis-py client or cluster client, or an object whose ``redis``
    attribute gives one per process (a ``CacheClient``: the shares then pickle)."""

    def __init__(self, client: Any, prefix: str = ods_defaults.KEY_PREFIX) -> None:
        self._source, self.prefix = client, prefix
        self.key = Keys.node(prefix)

    @property
    def client(self) -> Any:
        """The redis-py client of this process."""
        return client_of(self._source)

    def register(self, dataset: str, samples: int, want: int, need: int = 0) -> None:
        """Note what a loader of ``dataset`` asks: ``want`` bytes (0: whatever the node gives),
        ``need``: the most it can use (0: not known)."""
        fields = {f"want:{dataset}": int(want), f"samples:{dataset}": int(samples)}
        fields[f"seen:{dataset}"] = server_ms(self.client)
        if need:
            fields[f"need:{dataset}"] = int(need)
        self.client.hset(self.key, mapping=fields)

    def seen(self, dataset: str) -> None:
        """Note that a loader of ``dataset`` still looks at its share (it counts as active)."""
        self.client.hset(self.key, f"seen:{dataset}", server_ms(self.client))

    def forget(self, dataset: str) -> None:
        """Drop ``dataset`` from the node's record (it was cleared, or is long gone)."""
        fields = [f"{kind}:{dataset}" for kind in ("want", "need", "samples", "seen", "flight")]
        self.client.hdel(self.key, *fields)

    def needs(self, dataset: str, need: int, flight: int = 0) -> None:
        """Note that ``dataset`` can use at most ``need`` bytes (measured or planned), and that
        a job of it has ``flight`` bytes in flight at most (its processes' batches)."""
        fields = {f"need:{dataset}": int(need), f"flight:{dataset}": int(flight)}
        self.client.hset(self.key, mapping=fields)

    def _record(self) -> dict[str, dict[str, int]]:
        """The registered datasets: field -> value per dataset."""
        out: dict[str, dict[str, int]] = {}
        for field, value in self.client.hgetall(self.key).items():
            kind, _, dataset = text_of(field).partition(":")
            try:
                out.setdefault(dataset, {})[kind] = int(value)
            except ValueError:
                continue
        return out

    def _memory(self) -> tuple[int, int]:
        """(maxmemory, used_memory) of the node (a cluster's: summed over its primaries;
        maxmemory 0: no limit somewhere)."""
        if isinstance(self.client, redis.RedisCluster):
            target = redis.RedisCluster.PRIMARIES
            nodes = list(self.client.info("memory", target_nodes=target).values())
        else:
            nodes = [self.client.info("memory")]
        limits = [int(n.get("maxmemory", 0)) for n in nodes]
        used = sum(int(n.get("used_memory", 0)) for n in nodes)
        return (0 if not limits or 0 in limits else sum(limits)), used

    def _held(self, parts: list[str]) -> dict[str, int]:
        """The bytes each form of a dataset's tiers holds (``e``, ``d``, ``a:<view>``), over
        ``parts`` (``ods.shards.part_names``: its shards where it is kept in shards)."""
        forms = {LETTER[t] for t in TIERS}
        out: dict[str, int] = {}
        for part in parts:
            for field, value in self.client.hgetall(Keys(part, self.prefix).used).items():
                form = text_of(field)
                if form in forms or form.startswith("a:"):
                    out[form] = out.get(form, 0) + int(value or 0)
        return out

    def live(self, dataset: str, now: int, parts: list[str] | None = None) -> int:
        """The live jobs of ``dataset`` at server time ``now`` (of the shard that has most,
        where it is kept in shards; ``parts``: its ``ods.shards.part_names``, read if None)."""
        parts = part_names(self.client, dataset, self.prefix) if parts is None else parts
        return max(self.client.zcount(Keys(p, self.prefix).jobs, now, "+inf") for p in parts)

    def claims(self) -> tuple[int, dict[str, Claim], dict[str, dict[str, int]]]:
        """The node's total for tiers, every registered dataset's claim, and what each form of
        each dataset holds."""
        record = self._record()
        maxmemory, used = self._memory()
        now = server_ms(self.client)
        recent = now - int(ods_defaults.JOB_LEASE * 1000)
        forgotten = now - int(ods_defaults.JOB_FORGET * 1000)
        claims, held = {}, {}
        for dataset, f in record.items():
            parts = part_names(self.client, dataset, self.prefix)
            held[dataset] = self._held(parts)
            live = self.live(dataset, now, parts)
            if not live and not held[dataset] and f.get("seen", 0) < forgotten:
                continue  # long gone, and holds nothing: its room is free again
            claims[dataset] = Claim(
                want=f.get("want", 0),
                need=f.get("need", 0),
                active=live > 0 or f.get("seen", 0) > recent,  # jobs, or a loader just made
                held=sum(held[dataset].values()),
                seen=f.get("seen", 0),
                samples=f.get("samples", 0),
                flight=f.get("flight", 0) * live,
            )
        if not maxmemory:  # no limit: each gets what it asks, or the default cache size
            total = sum(c.want or defaults.CACHE_SIZE for c in claims.values())
        else:
            values = sum(c.held for c in claims.values())
            rooms = sum(metadata_room(c.samples) + c.flight for c in claims.values())
            headroom = int(defaults.NODE_HEADROOM * maxmemory)
            total = max(0, maxmemory - (used - values) - rooms - headroom)
        return total, claims, held

    def shares(self) -> tuple[int, dict[str, int]]:
        """The node's total for tiers and every registered dataset's share of it; an idle
        dataset that holds more than its share is shrunk to it (a few bounded calls)."""
        total, claims, held = self.claims()
        out = allocate(total, claims)
        for dataset, claim in claims.items():
            if not claim.active and claim.held > out[dataset]:
                self._shrink(dataset, claim.samples, held[dataset], out[dataset])
        return total, out

    def _shrink(self, dataset: str, samples: int, forms: Mapping[str, int], share: int) -> None:
        """Evict from an idle ``dataset`` of ``samples`` samples (holding ``forms``) down to
        ``share`` bytes: each form keeps its part of the share."""
        scale = share / max(1, sum(forms.values()))
        views = {f[2:] for f in forms if f.startswith("a:")} or {""}
        try:
            size = recorded_shard_size(self.client, dataset, self.prefix)
            for view in sorted(views):
                store = open_store(
                    self.client,
                    dataset,
                    max(1, samples),
                    size,
                    view=view,
                    values=True,
                    prefix=self.prefix,
                )
                keys = store.keys
                caps = {t: int(forms.get(keys.form(t), 0) * scale) for t in TIERS}
                for _ in range(defaults.AUTO_SHRINK_CALLS):
                    if not any(store.shrink(_UPKEEP, caps).values()):
                        break
        except (*CACHE_FAILURES, SenecaError) as err:
            log.debug("idle dataset %s not shrunk: %s", dataset, err)
