"""OdsStore: the cache engine of one dataset: its metadata in Redis and the calls that read and
change it, for ODS's sampler and for loaders with their own order alike.

Every decision and every budget check is made by calls (``FCALL``) of the engine's functions
(``ods.functions``), each atomic and one round trip: one per batch, or several of bounded size
for a large batch or admission, so that no call holds the server's one thread for long; values
never pass through them.
Per sample the store keeps which forms are cached (three bitmaps) and the bytes each is charged;
per job a lease, its unserved samples this epoch and last, the augmented copies it used and,
optionally, the samples it trains on.

Values live outside the metadata's slot. An admission SETs each value under an expiring
staging key next to its own key, in the same round trip as the call that accounts for it; then
the admitted ones are renamed into place (made permanent) and the rest deleted. Evicted values
are deleted by the caller the call named them to, and named again to a later caller once a
grace period has passed (in case the first crashed, or a late rename put a value back). So a
budget is never exceeded, a value whose entry is gone is never read (reads are decided from the
metadata, and hits are pinned until released), a value nobody admitted expires, and one whose
entry was evicted is deleted within the grace period plus the next admission.

Policies (one Lua module each, ``ods/functions/policies/``; ``ods.functions.POLICIES``):

* ``seneca`` (demand-aware, the default): entries stay while there is room; under pressure an
  admission evicts the probed entry with the least remaining demand (live jobs that still need
  it this epoch), and only if that demand is lower than the new sample's. An augmented copy is
  dropped once every live job of its view (transform) has used it.
* ``paper``: a hit increments the sample's reference count; at the number of live jobs the
  sample is evicted (once no fetch of it is in flight); misses are admitted only while there is
  room.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ods import defaults
from ods.admission import admit
from ods.bitmaps import set_bit
from ods.decision import Decision, Pick, hits_by_bucket, merge_decisions, parse_decision
from ods.engine import Engine
from ods.functions import POLICIES, error_of
from ods.keys import Keys
from ods.outbox import Call, Outbox, Poster
from seneca_base.errors import ConfigError
from seneca_base.split import Split
from seneca_base.tiers import LETTER, TIERS, tier_of_letter

__all__ = ["POLICIES", "Decision", "Glance", "OdsStore", "allocated", "checked_tail", "members_of"]


@dataclass(frozen=True)
class Glance:
    """What a batch's round trip read of the cache beside its values
    (:meth:`OdsStore.glance`): ``used``, the units each tier of the dataset holds; ``part``,
    those of the part of the cache the batch's values go to (``shards``: which shards; one
    store: all of it, ``used``); ``live``, the live jobs of the caller's view; ``budgets``,
    the reply of :meth:`OdsStore.budgets_command`."""

    used: dict[str, int]
    part: dict[str, int]
    shards: tuple[int, ...]
    live: int
    budgets: object
    replies: int  # how many replies, at the end of the round trip's, it read


def members_of(indices: Iterable[int], samples: int) -> list[int]:
    """``indices`` as the sorted distinct samples a job trains on; ConfigError unless they
    are a non-empty subset of a dataset of ``samples`` samples."""
    members = sorted({int(i) for i in indices})
    if not members or members[0] < 0 or members[-1] >= samples:
        raise ConfigError(
            f"indices: expected a non-empty subset of 0..{samples - 1}, got {len(members)} indices"
        )
    return members


def checked_tail(replies: Sequence[Any], n: int) -> Sequence[Any]:
    """The last ``n`` of ``replies``; an error reply among them but the last is raised."""
    tail = replies[len(replies) - n :]
    for reply in tail[:-1]:
        if isinstance(reply, redis.RedisError):
            raise reply
    return tail


def allocated(size: int) -> int:
    """Bytes the server's allocator takes for a value of ``size`` bytes: jemalloc (Redis's
    default) rounds a request up to its size class, four classes per power of two (a decoded
    500 x 375 image of 562,500 bytes takes 655,360); other allocators take no more."""
    if size <= 16:
        return 16
    step = 1 << max((size - 1).bit_length() - 3, 4)
    return -(-size // step) * step


class OdsStore(Engine):
    """The cache engine of one dataset of ``samples`` samples.

    Args:
        client: a redis-py client (decode_responses must be False), or an object whose
            ``redis`` attribute gives one per process (``seneca._cache.client.CacheClient``;
            the store then pickles into DataLoader workers).
        dataset: dataset id (a fingerprint); metadata keys share the hash tag ``{<dataset>}``.
        samples: number of samples in the dataset.
        policy: ``"seneca"`` or ``"paper"`` (see the module docstring).
        capacity: per tier (``augmented``/``decoded``/``encoded``) the units it may hold:
            bytes when values are stored, entries when payload-free.
        values: store sample values (their keys: :meth:`value_key`); False for payload-free
            use (``ods simulate``), where every entry is one unit.
        overhead: units charged per stored value on top of what its bytes take in the
            server's memory (:meth:`charge`).
        lease: seconds a job stays live without a call (None: ``ods.defaults.JOB_LEASE``);
            pin_lease: seconds a decision keeps its hits from eviction unless released earlier.
        view: the job's view of the dataset (a transform's id: augmented copies are kept per
            view, the encoded and decoded tiers are shared by every view; see ``ods.keys``).
        orphan_grace: seconds an evicted entry's value may outlive it before any later admit
            or release deletes it (see ``ods.defaults.ORPHAN_GRACE_MS``).
        job_forget: seconds after its lease ran out that a job's metadata is deleted by any
            job's next admission or release (None: ``ods.defaults.JOB_FORGET``).
        decide_chunk: the samples one ``decide`` call serves at most (None: the rule of
            :attr:`decide_chunk`; a shard of a larger dataset gets more: ``ods.shards``).
        outbox: the outbox its later-read calls go through (None: one of its own; a dataset's
            shards share one: ``ods.shards``).
    """

    def __init__(
        self,
        client: redis.Redis,
        dataset: str,
        samples: int,
        *,
        policy: str = defaults.POLICY,
        capacity: Mapping[str, int] | None = None,
        values: bool = False,
        overhead: int = 0,
        lease: float | None = None,
        pin_lease: float = defaults.PIN_LEASE,
        orphan_grace: float = defaults.ORPHAN_GRACE_MS / 1000,
        job_forget: float | None = None,
        prefix: str = defaults.KEY_PREFIX,
        view: str = "",
        seed: int | None = None,
        decide_chunk: int | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples <= 0:
            raise ConfigError(f"samples: expected a positive integer, got {samples!r}")
        capacity = dict(capacity or {})
        unknown = set(capacity) - set(TIERS)
        if unknown:
            raise ConfigError(f"capacity: unknown tier {sorted(unknown)[0]!r}")
        super().__init__(
            client,
            Keys(dataset, prefix, view),
            policy=policy,
            capacity={t: int(capacity.get(t, 0)) for t in TIERS},
            values=values,
            pin_lease=pin_lease,
            orphan_grace=orphan_grace,
            seed=seed,
            job_forget=job_forget,
            outbox=outbox,
        )
        self.samples = samples
        self.overhead = int(overhead)
        self.lease_ms = int((defaults.JOB_LEASE if lease is None else lease) * 1000)
        self._decide_chunk = decide_chunk

    def apply_split(self, split: Split, size: int) -> None:
        """Budget the tiers as ``split`` of a cache of ``size`` units: what every split that
        changes this store's :attr:`capacity` goes through."""
        self.capacity = split.budgets(size)

    @property
    def budget_total(self) -> int:
        """Units the tiers may hold together."""
        return sum(self.capacity.values())

    def charge(self, size: int) -> int:
        """Units a stored value of ``size`` bytes is charged: what its bytes take in the
        server's memory (:func:`allocated`) plus ``overhead``; payload-free: one unit."""
        return allocated(size) + self.overhead if self.values else 1

    # -- jobs -------------------------------------------------------------------------------

    def join(self, job: str, indices: Sequence[int] | None = None) -> tuple[int, int]:
        """Register ``job`` (or renew it); ``indices``: the samples it trains on (default all).

        Returns the job's (epoch, served) so a restarted job resumes; epoch is -1 before its
        first :meth:`start_epoch`.
        """
        count = self.samples
        if indices is not None:
            members = members_of(indices, self.samples)
            bits = bytearray((self.samples + 7) // 8)
            for i in members:
                set_bit(bits, i)
            self.client.set(self.keys.members(self.keys.job_name(job)), bytes(bits))
            count = len(members)
        _, epoch, served = self.call("join", job, self.lease_ms, count)
        self.refresh_jobs()
        return int(epoch), int(served)

    def leave(self, job: str) -> None:
        """Remove ``job`` and its state; it stops counting at once."""
        self.call("leave", job)

    def renew(self, job: str) -> bool:
        """Renew the lease of ``job`` if it is registered (a job that left, or was never
        joined, stays out); returns whether it was. One command, no function call: what keeps
        a job live while its loader exists, whatever its batches do."""
        name = self.keys.job_name(job)
        expiry = self.now_ms() + self.lease_ms
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(self.keys.jobs, {name: expiry}, xx=True, gt=True)
        pipe.zscore(self.keys.jobs, name)
        return pipe.execute()[1] is not None

    def lease_end(self, job: str) -> int | None:
        """When (server ms) the lease of ``job`` runs out; None when it is not registered."""
        score = self.client.zscore(self.keys.jobs, self.keys.job_name(job))
        return None if score is None else int(score)

    def lapse(self, job: str) -> None:
        """End the lease of ``job`` now and keep its state: other jobs stop counting it at once,
        a run that continues its epoch (:meth:`restore`) joins it again, and its metadata goes
        ``job_forget`` seconds later, as a lease run out does."""
        name = self.keys.job_name(job)
        # a millisecond back: a job is live while its lease's end is now or later
        self.client.zadd(self.keys.jobs, {name: self.now_ms() - 1}, xx=True)

    def start_epoch(self, job: str, epoch: int) -> tuple[int, int]:
        """Start ``epoch`` for ``job`` unless it (e.g. another rank) already did.

        Returns (epoch, served) as now stored.
        """
        e, served = self.call("epoch", job, int(epoch), self.samples)
        return int(e), int(served)

    def restore(self, job: str, epoch: int, consumed: bytes) -> int:
        """Continue ``epoch`` with every sample not set in the bitmap ``consumed`` (bit i, most
        significant first in each byte, as Redis stores bitmaps); returns the samples counted
        as served. For a job restarted from a checkpoint."""
        _, served = self.call("restore", job, int(epoch), self.samples, bytes(consumed))
        return int(served)

    # -- batches ----------------------------------------------------------------------------

    def _decide_args(self, batch: int, substitute: bool, epoch: int | None) -> list[object]:
        return [
            int(batch),
            self.lease_ms,
            self._seed(),
            self.samples,
            1 if substitute else 0,
            self.policy,
            "" if epoch is None else int(epoch),
            1 if defaults.SPEND_FIRST else 0,
            defaults.DEMAND_JOBS,
        ]

    def decide(
        self,
        job: str,
        batch: int,
        substitute: bool = True,
        epoch: int | None = None,
        at: int | None = None,
        *,
        later: bool = False,
    ) -> Decision | Call:
        """The next batch of at most ``batch`` samples the job has not seen in ``epoch``
        (default: its latest started epoch; the two latest can be served at once).

        Misses are replaced by cached samples the job has not seen (unless ``substitute`` is
        False); the displaced misses stay unseen and come in a later batch. Hits are pinned
        until :meth:`release`. An empty batch means the epoch is complete. A batch larger
        than :attr:`decide_chunk` is decided in several calls, one round trip each, so that
        no call holds the server for long; they are made at one server time (their hits
        share one pin bucket) and their samples shuffled together. ``at``: the server time
        the call is made at (default now).

        ``later``: the call (at most :attr:`decide_chunk` samples) is posted to this process's
        :attr:`outbox` instead, sent at the next flush (after the current batch's values were
        read) or at once when no fetch here flushes, and run at the server's time then;
        :meth:`collect` gives its Decision.
        """
        chunk = self.decide_chunk
        if later:
            if batch > chunk:
                raise ConfigError(f"batch: {batch} is more than one call decides ({chunk})")
            if at is not None:
                raise ConfigError("at: a posted decision runs at the server's time when sent")
            args = self._decide_args(batch, substitute, epoch)
            return self.outbox.post(self.command("decide", job, *args, jobs=True))
        if batch <= chunk:
            args = self._decide_args(batch, substitute, epoch)
            return parse_decision(self.call("decide", job, *args, jobs=True, at=at))
        at, parts, left = self.now_ms() if at is None else at, [], batch
        while left > 0:
            want = min(left, chunk)
            args = self._decide_args(want, substitute, epoch)
            parts.append(parse_decision(self.call("decide", job, *args, jobs=True, at=at)))
            epoch, got = parts[-1].epoch, len(parts[-1].indices)
            left -= got
            if got < want:  # the epoch has no more
                break
        return merge_decisions(parts, random.Random(self._seed()))

    @property
    def decide_chunk(self) -> int:
        """The samples one ``decide`` call serves at most (``ods.defaults.DECIDE_CHUNK``,
        more for a large dataset, unless given when the store was made)."""
        if self._decide_chunk is not None:
            return self._decide_chunk
        return max(defaults.DECIDE_CHUNK, self.samples // defaults.DECIDE_CHUNK_SAMPLES)

    def collect(self, call: Call) -> Decision | None:
        """The decision of ``call`` (a :meth:`decide` posted ``later``); None when its reply is an
        error (the functions missing, the job forgotten): call :meth:`decide`."""
        reply = call.result()
        return None if isinstance(reply, redis.ResponseError) else parse_decision(reply)

    def lookup(self, job: str, indices: Sequence[int], at: int | None = None) -> Decision:
        """Where ``job`` can read each of ``indices`` (its own order, no sampling): tiers as
        :meth:`decide` gives them, hits pinned until :meth:`release` (``at``: the server
        time the call is made at, default now)."""
        args = [self.lease_ms, self.policy, *map(int, indices)]
        tiers, bucket = self.call("lookup", job, *args, at=at)
        return Decision(
            epoch=-1,
            served=0,
            substitutions=0,
            indices=[int(i) for i in indices],
            tiers=[tier_of_letter(t) for t in tiers],
            pin_bucket=int(bucket),
        )

    def release(
        self, job: str, picks: Decision | Sequence[Pick], via: Poster | None = None
    ) -> list[int]:
        """Unpin the hits among ``picks`` (a decision's, or a batch's picks: their fetch is
        done, or will not be), one call per pin bucket. Now (``via`` None): returns the samples
        evicted (their values deleted). Or posted ``via`` the :attr:`outbox` or a
        ``RoundTrip`` the caller sends: each reply, once read, has the evicted values deleted
        through the outbox (a call that failed for a reason it recovers from is made again);
        returns nothing."""
        if isinstance(picks, Decision):
            picks = picks.picks()
        evicted: list[int] = []
        for bucket, hits in hits_by_bucket(picks).items():
            args = (job, self.policy, int(bucket), *hits)
            if via is None:
                evicted += self.unlink_values(self.call("release", *args, jobs=True))
            else:
                done = functools.partial(self._released, job, bucket, hits)
                via.post(self.command("release", *args, jobs=True), on_reply=done)
        return evicted

    def _released(self, job: str, bucket: int, hits: Sequence[int], reply: object) -> None:
        """Handle the reply of a release posted: delete the evicted values (posted to the
        outbox), or release again when the call failed for a reason it recovers from."""
        if isinstance(reply, Exception):
            if not self.recover(reply):
                raise error_of(reply)
            reply = self.call("release", job, self.policy, int(bucket), *hits, jobs=True)
        self.unlink_values(reply, now=False)  # type: ignore[arg-type]

    def claim(
        self, job: str, read: Sequence[int], waiting: Sequence[int] = ()
    ) -> tuple[list[int], list[int]]:
        """Claim the augmented copies of promised samples (``Decision.promised``) that the
        caller has ``read``: those still cached that ``job`` has not used become its hits
        (marked used, counted); the copies every live job has used then go. Returns the samples
        claimed, and those of ``waiting`` still worth waiting for (another job is still making
        them, or their copies were admitted and their values are being put in place)."""
        if not read and not waiting:
            return [], []
        got, still, evicted = self.call(
            "claim", job, self.policy, len(read), *read, *waiting, jobs=True
        )
        self.unlink_values(evicted, now=False)
        return [int(i) for i in got], [int(i) for i in still]

    def swap(self, job: str, epoch: int, misses: Sequence[int]) -> list[Pick]:
        """Serve copies cached since a batch of ``epoch`` was decided in place of its
        ``misses`` not yet made (in the order the caller would make them): as many as the
        job may use, drawn as :meth:`decide` draws its substitutions. The k-th pick returned
        (a hit, pinned until released) replaces the k-th miss; the misses replaced go back to
        the job's unserved samples and come in a later batch. None once every sample of the
        epoch has been served (a miss put back then would never come)."""
        if not misses:
            return []
        args = [int(epoch), self.lease_ms, self._seed(), self.samples, self.policy]
        args += [1 if defaults.SPEND_FIRST else 0, defaults.DEMAND_JOBS]
        hits, tiers, bucket = self.call("swap", job, *args, *misses, jobs=True)
        return [
            Pick(int(i), tier_of_letter(t), int(bucket)) for i, t in zip(hits, tiers, strict=True)
        ]

    def forget(self, job: str, entries: Sequence[tuple[str, int]]) -> list[int]:
        """Drop the entries ``(tier, sample)`` (their values found corrupt or foreign) and
        delete their values; returns the samples dropped."""
        flat: list[object] = []
        for tier, index in entries:
            flat += [LETTER[tier], int(index)]
        return self.unlink_values(self.call("forget", job, *flat))

    def shrink(self, job: str, capacity: Mapping[str, int]) -> dict[str, int]:
        """Evict entries of the tiers that hold more than ``capacity`` (units per tier), the
        least needed unpinned ones first, at most ``ods.defaults.SHRINK_CHUNK`` per tier in
        this call, and delete their values. Returns per tier the units still above its
        budget (call again while any is left; pinned entries stay until released)."""
        caps = [int(capacity[t]) for t in TIERS]
        args = [self.admission_seed(), defaults.SHRINK_CHUNK, defaults.DEMAND_JOBS]
        args += [defaults.EVICTION_CANDIDATES, defaults.EVICTION_POOL]
        over, evicted = self.call("shrink", job, *caps, *args, jobs=True)
        self.unlink_values(evicted)
        return {t: int(v) for t, v in zip(TIERS, over, strict=True)}

    def value_key(self, tier: str, index: int) -> str:
        """The key holding the value of sample ``index`` in ``tier``."""
        return self.keys.value(tier, index)

    def value_keys(self, items: Iterable[tuple[str, int]]) -> list[str]:
        """:meth:`value_key` of each ``(tier, index)`` item."""
        return self.keys.values(items)

    def live_command(self) -> tuple[object, ...]:
        """The command whose reply :meth:`same_view` counts: the live jobs' names."""
        return ("ZRANGE", self.keys.jobs, self.now_ms(), "+inf", "BYSCORE")

    def same_view(self, names: Sequence[bytes | bytearray | str]) -> int:
        """How many of ``names`` (a :meth:`live_command` reply) are jobs of this view: those
        an augmented copy made here can serve."""
        texts = (bytes(n).decode() if isinstance(n, bytes | bytearray) else n for n in names)
        return sum(Keys.view_of(t) == self.keys.view for t in texts)

    def tier_key(self, tier: str) -> str:
        """The bitmap of samples cached in ``tier``."""
        return self.keys.tier(tier)

    def budgets_command(self) -> tuple[str, ...]:
        """The command whose reply is the budgets in force (TIERS order, as
        :meth:`publish_budgets` wrote them; None for a tier not written yet)."""
        return ("HMGET", self.keys.info, *(self.keys.budget_field(t) for t in TIERS))

    def adopt_budgets(self, reply: Sequence[object]) -> bool:
        """Budget the tiers as a :meth:`budgets_command` ``reply`` says (left as they are
        unless every tier's budget is there); returns whether they changed."""
        try:
            budgets = {t: int(v) for t, v in zip(TIERS, reply, strict=True)}
        except (TypeError, ValueError):
            return False
        changed = budgets != self.capacity
        self.capacity = budgets
        return changed

    def publish_budgets(self, job: str, version: int | None = None) -> bool:
        """Write this store's budgets where every process of every job of the dataset reads
        them (:meth:`budgets_command`) and ``seneca cache status`` shows them; ``job``: the
        job that publishes them; ``version``: that of the plan they split the cache by, when a
        plan does. Budgets of an older plan than those in force are not written: this store
        takes those in force instead. Returns whether these were written. Written by a
        function, which a server out of memory still runs (see :meth:`fit_budgets`)."""
        flat: list[object] = []
        for t in TIERS:
            flat += [self.keys.budget_field(t), self.capacity[t]]
        mark = "" if version is None else int(version)
        reply = self.call("budgets", job, "set", mark, *flat)
        return not self.adopt_budgets(reply)

    def fit_budgets(self, job: str, total: int) -> None:
        """Shrink the budgets in force, in their proportions, to hold at most ``total`` units
        together (the server refused writes for want of memory), and take them: those in
        force shrink, whatever this store last read of them."""
        fields = [self.keys.budget_field(t) for t in TIERS]
        self.adopt_budgets(self.call("budgets", job, "fit", int(total), *fields))

    def used_command(self) -> tuple[str, ...]:
        """The command whose reply is the units each tier holds (TIERS order)."""
        return ("HMGET", self.keys.used, *(self.keys.form(t) for t in TIERS))

    def glance_commands(self, indices: Sequence[int]) -> list[tuple]:
        """The commands a batch of ``indices`` sends with its values' reads, whose replies
        :meth:`glance` reads: the tiers' usage, the live jobs, the budgets in force."""
        return [self.used_command(), self.live_command(), self.budgets_command()]

    def glance(self, indices: Sequence[int], replies: Sequence[Any]) -> Glance:
        """What the replies of :meth:`glance_commands`, the last of ``replies``, say; an
        error among them is raised (the budgets' is left to the caller: none are in force)."""
        used_reply, live, budgets = checked_tail(replies, 3)
        used = {t: int(v or 0) for t, v in zip(TIERS, used_reply, strict=True)}
        return Glance(used, used, (0,), self.same_view(live), budgets, 3)

    def room(self, glance: Glance) -> dict[str, int]:
        """The units left per tier, as ``glance`` saw the tiers (against the budgets now)."""
        return {t: self.capacity[t] - glance.part[t] for t in TIERS}

    def admit(
        self,
        job: str,
        items: Sequence[tuple[int, str, int, bytes]],
        wait: bool = True,
        made: Sequence[int] = (),
        later: Collection[int] = (),
    ) -> list[int]:
        """Offer samples to the cache: (index, tier, size in units, value or b""); see
        ``ods.admission``. Returns per item 1 (admitted), 2 (already cached in that form), 0
        (refused by the policy: no room) or -1 (the server refused to store its value: an
        error, such as OOM at ``maxmemory``; an admitted entry is forgotten again).
        ``wait=False``: the values' renames and deletions are posted to the outbox. A
        decision's misses are pending until offered: ``made`` names those the job made from
        storage and does not offer. ``later``: the positions of items whose values are sent
        only once admitted (offers to a tier likely full: a refusal then costs no bytes)."""
        return admit(self, job, items, wait, made, later)

    # -- inspection -------------------------------------------------------------------------

    def register(self, about: str) -> None:
        """Note for operators (``seneca cache status``) what the dataset is and its size, and
        this job's budgets where none are in force yet (those in force are published:
        :meth:`publish_budgets`)."""
        pipe = self.client.pipeline(transaction=False)
        fields = {"samples": self.samples, "about": about, "seen": self.now_ms()}
        pipe.hset(self.keys.info, mapping=fields)  # type: ignore[arg-type]
        for t in TIERS:
            pipe.hsetnx(self.keys.info, self.keys.budget_field(t), self.capacity[t])
        pipe.execute()

    def state(self) -> dict[str, object]:
        """Entries and units held per tier, and the number of live jobs."""
        vals = [int(v) for v in self.call("state", "")]
        out: dict[str, object] = {}
        for k, tier in enumerate(TIERS):
            out[tier] = {"entries": vals[2 * k], "units": vals[2 * k + 1]}
        out["live_jobs"] = vals[-1]
        return out

    def usage(self) -> dict[str, int]:
        """Units (bytes when values are stored) charged to each tier."""
        used = self.client.execute_command(*self.used_command())
        return {t: int(v or 0) for t, v in zip(TIERS, used, strict=True)}

    def cached(self, tier: str, indices: Sequence[int]) -> list[bool]:
        """Whether each of ``indices`` is cached in ``tier``."""
        pipe = self.client.pipeline(transaction=False)
        for i in indices:
            pipe.getbit(self.keys.tier(tier), int(i))
        return [bool(b) for b in pipe.execute()]

    def _scan(self, pattern: str) -> list[bytes]:
        return list(self.client.scan_iter(match=pattern, count=1000))

    def memory(self) -> int:
        """Bytes Redis uses for this dataset's metadata (MEMORY USAGE of its keys)."""
        keys = self._scan(self.keys.patterns()[0])
        return sum(int(self.client.memory_usage(k, samples=0) or 0) for k in keys)

    def clear(self) -> int:
        """Delete every key of this dataset (metadata, values, staged values); returns how
        many."""
        n = 0
        for pattern in self.keys.patterns():
            keys = self._scan(pattern)
            for k in range(0, len(keys), 500):
                n += self.client.unlink(*keys[k : k + 500])
        return n
