"""OdsStore: one dataset's ODS metadata in Redis, and the atomic calls that read and change it.

Every call is one EVALSHA of ``ods/lua/ods.lua``, so each decision is atomic and takes one
round trip. Per sample the store keeps which forms are cached (three bitmaps) and, for the
``paper`` policy, a one-byte reference count; per job a seen bitmap, the augmented copies it
used, an optional membership bitmap and a lease in the job registry.

Policies:

* ``paper``: a hit increments the sample's reference count; at the number of live jobs the
  sample is evicted (once no fetch of it is in flight) and the caller refills the room with
  random samples; misses are admitted only while there is room.
* ``seneca`` (demand-aware): entries stay while there is room; under pressure an admission
  evicts the probed entry with the least remaining demand (live jobs that still need it this
  epoch), and only if that demand is lower than the new sample's. An augmented copy is dropped
  once every live job has used it.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Mapping, Sequence
from importlib import resources

import redis

from ods import defaults
from ods.decision import Decision, parse_decision
from ods.outbox import Call, Outbox
from seneca_base.errors import ConfigError
from seneca_base.tiers import LETTER, TIERS, with_lua_tiers

__all__ = [
    "POLICIES",
    "Decision",
    "OdsStore",
    "parse_decision",
    "set_bit",
    "test_bit",
]

POLICIES = ("seneca", "paper")
_SCRIPT = with_lua_tiers((resources.files("ods") / "lua" / "ods.lua").read_text())


def set_bit(bits: bytearray, i: int) -> None:
    """Set bit ``i`` of ``bits`` in Redis' order (most significant bit of each byte first)."""
    bits[i >> 3] |= 0x80 >> (i & 7)


def test_bit(bits: bytes | bytearray, i: int) -> bool:
    """Bit ``i`` of ``bits`` in Redis' order."""
    return bool(bits[i >> 3] & (0x80 >> (i & 7)))


class OdsStore:
    """The ODS metadata of one dataset of ``samples`` samples.

    Args:
        client: a redis-py client (decode_responses must be False), or an object whose
            ``redis`` attribute gives one per process (``seneca.cache.client.CacheClient``;
            the store then pickles into DataLoader workers).
        dataset: dataset id (a fingerprint); keys share the hash tag ``{<dataset>.0}``.
        samples: number of samples in the dataset.
        policy: ``"seneca"`` or ``"paper"`` (see the module docstring).
        capacity: per tier (``augmented``/``decoded``/``encoded``) the units it may hold:
            bytes when values are stored, entries when payload-free.
        values: store sample values next to the metadata (value key: :meth:`value_key`);
            False for payload-free use (``ods simulate``).
        overhead: units charged per stored value on top of its length.
        lease: seconds a job stays live without a call; pin_lease: seconds a decision keeps its
            hits from eviction unless released earlier.
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
        lease: float = defaults.JOB_LEASE,
        pin_lease: float = defaults.PIN_LEASE,
        prefix: str = defaults.KEY_PREFIX,
        seed: int | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples <= 0:
            raise ConfigError(f"samples: expected a positive integer, got {samples!r}")
        capacity = dict(capacity or {})
        unknown = set(capacity) - set(TIERS)
        if unknown:
            raise ConfigError(f"capacity: unknown tier {sorted(unknown)[0]!r}")
        self._source = client
        self.samples = samples
        self.policy = policy
        self.capacity = {t: int(capacity.get(t, 0)) for t in TIERS}
        self.prefix = f"{prefix}:{{{dataset}.0}}:o:"
        self.data_prefixes = {t: f"{self.prefix}v:{LETTER[t]}:" if values else "" for t in TIERS}
        self.overhead = int(overhead)
        self.lease_ms = int(lease * 1000)
        self.pin_lease_ms = int(pin_lease * 1000)
        self._sha = hashlib.sha1(_SCRIPT.encode()).hexdigest()
        self._seed_value = seed
        self._rng = random.Random(seed)
        self._pid = os.getpid()
        #: calls of this process whose replies are read later (see ``ods.outbox``)
        self.outbox = Outbox(lambda: self.client)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        """The redis-py client of this process."""
        source = self._source
        return source.redis if hasattr(source, "redis") else source

    def _argv(self, cmd: str, job: str, *args: object) -> list[object]:
        return [cmd, self.prefix, job, int(time.time() * 1000), *args]

    def _call(self, cmd: str, job: str, *args: object) -> object:
        return self._run(self._argv(cmd, job, *args))

    def _run(self, argv: list[object]) -> object:
        try:
            return self.client.evalsha(self._sha, 0, *argv)
        except redis.exceptions.NoScriptError:
            return self.client.eval(_SCRIPT, 0, *argv)

    def _seed(self) -> int:
        if os.getpid() != self._pid:  # a forked worker: its own random stream
            self._pid = os.getpid()
            self._rng = random.Random(
                None if self._seed_value is None else self._seed_value + self._pid
            )
        return self._rng.randrange(1, 2**31)

    def _prefixes(self) -> list[str]:
        return [self.data_prefixes[t] for t in TIERS]

    # -- jobs -------------------------------------------------------------------------------

    def join(self, job: str, indices: Sequence[int] | None = None) -> tuple[int, int]:
        """Register ``job`` (or renew it); ``indices``: the samples it trains on (default all).

        Returns the job's (epoch, served) so a restarted job resumes; epoch is -1 before its
        first :meth:`start_epoch`.
        """
        count = self.samples
        if indices is not None:
            members = sorted({int(i) for i in indices})
            if not members or members[0] < 0 or members[-1] >= self.samples:
                raise ConfigError(
                    f"indices: expected a non-empty subset of 0..{self.samples - 1}, "
                    f"got {len(members)} indices"
                )
            bits = bytearray((self.samples + 7) // 8)
            for i in members:
                set_bit(bits, i)
            self.client.set(self.prefix + "m:" + job, bytes(bits))
            count = len(members)
        _, epoch, served = self._call("join", job, self.lease_ms, count, self.samples)
        return int(epoch), int(served)

    def leave(self, job: str) -> None:
        """Remove ``job`` and its state; it stops counting at once."""
        self._call("leave", job)

    def start_epoch(self, job: str, epoch: int) -> tuple[int, int]:
        """Start ``epoch`` for ``job`` unless it (e.g. another rank) already did.

        Returns (epoch, served) as now stored.
        """
        e, served = self._call("epoch", job, int(epoch), self.samples)
        return int(e), int(served)

    # -- batches ----------------------------------------------------------------------------

    def _decide_argv(
        self, job: str, batch: int, substitute: bool, epoch: int | None
    ) -> list[object]:
        return self._argv(
            "decide",
            job,
            int(batch),
            self.lease_ms,
            self._seed(),
            self.samples,
            1 if substitute else 0,
            self.policy,
            self.pin_lease_ms,
            "" if epoch is None else int(epoch),
        )

    def decide(
        self, job: str, batch: int, substitute: bool = True, epoch: int | None = None
    ) -> Decision:
        """The next batch of at most ``batch`` samples the job has not seen in ``epoch``
        (default: its latest started epoch; the two latest can be served at once).

        Misses are replaced by cached samples the job has not seen (unless ``substitute`` is
        False); the displaced misses stay unseen and come in a later batch. Hits are pinned
        until :meth:`release`. An empty batch means the epoch is complete.
        """
        return parse_decision(self._run(self._decide_argv(job, batch, substitute, epoch)))

    def decide_later(
        self, job: str, batch: int, substitute: bool = True, epoch: int | None = None
    ) -> Call:
        """:meth:`decide`, posted to this process's :attr:`outbox`: sent at the next flush
        (after the current batch's values were read), or at once when no fetch here flushes.
        ``parse_decision(call.result())`` gives the Decision; a NOSCRIPT reply means: call
        :meth:`decide`."""
        argv = self._decide_argv(job, batch, substitute, epoch)
        return self.outbox.post(("EVALSHA", self._sha, 0, *argv))

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "outbox"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.outbox = Outbox(lambda: self.client)

    def restore(self, job: str, epoch: int, consumed: bytes) -> int:
        """Continue ``epoch`` with every sample not set in the bitmap ``consumed`` (bit i, most
        significant first in each byte, as Redis stores bitmaps); returns the samples counted
        as served. For a job restarted from a checkpoint."""
        _, served = self._call("restore", job, int(epoch), self.samples, bytes(consumed))
        return int(served)

    def release(self, job: str, decision: Decision) -> list[int]:
        """Unpin the hits of ``decision`` (their fetch is done); returns samples evicted now."""
        hits = [i for i, t in zip(decision.indices, decision.tiers, strict=True) if t]
        return self.release_hits(job, decision.pin_bucket, hits)

    def _release_argv(self, job: str, bucket: int, hits: Sequence[int]) -> list[object]:
        return self._argv(
            "release",
            job,
            self.policy,
            self.overhead,
            *self._prefixes(),
            self.pin_lease_ms,
            int(bucket),
            *hits,
        )

    def release_hits(self, job: str, bucket: int, hits: Sequence[int]) -> list[int]:
        """Unpin ``hits`` decided in pin ``bucket``; returns samples evicted now."""
        if not hits:
            return []
        out = self._run(self._release_argv(job, bucket, hits))
        return [int(i) for i in out]

    def release_later(self, job: str, bucket: int, hits: Sequence[int]) -> None:
        """:meth:`release_hits` posted to the :attr:`outbox` (sent at its next flush); the
        reply is read at the flush after (NOSCRIPT: released again with the script loaded)."""
        if not hits:
            return

        def check(reply: object) -> None:
            if isinstance(reply, redis.exceptions.NoScriptError):
                self.release_hits(job, bucket, hits)
            elif isinstance(reply, Exception):
                raise reply

        self.outbox.post(self.release_command(job, bucket, hits), on_reply=check)

    def release_command(self, job: str, bucket: int, hits: Sequence[int]) -> tuple[object, ...]:
        """:meth:`release_hits` as one ``EVALSHA`` command, to send in a pipeline after the
        reads of the values it unpins (a NOSCRIPT reply means: call :meth:`release_hits`)."""
        return ("EVALSHA", self._sha, 0, *self._release_argv(job, bucket, hits))

    def value_key(self, tier: str, index: int) -> str:
        """The key holding the value of sample ``index`` in ``tier`` (values stored)."""
        return f"{self.data_prefixes[tier]}{int(index)}"

    def live_jobs_key(self) -> str:
        """The registry zset: job -> lease expiry in ms."""
        return self.prefix + "jobs"

    def tier_key(self, tier: str) -> str:
        """The bitmap of samples cached in ``tier``."""
        return f"{self.prefix}t:{LETTER[tier]}"

    def used_key(self, tier: str) -> str:
        """The counter of units ``tier`` holds."""
        return f"{self.prefix}u:{LETTER[tier]}"

    def admit(self, job: str, items: Sequence[tuple[int, str, int, bytes]]) -> list[int]:
        """Offer samples to the cache: (index, tier, size in units, value or b"").

        One round trip: the values are SET under staging keys (expiring after
        ``ods.defaults.STAGED_VALUE_TTL_MS``) and the script renames the admitted ones to their data
        keys, so the bytes never pass through Lua. Returns per item 1 (admitted), 2 (already
        cached in that form) or 0 (refused, also when Redis refused to store its value).
        """
        if not items:
            return []
        token = os.urandom(8).hex()
        pipe = self.client.pipeline(transaction=False)
        flat: list[object] = []
        for k, (index, tier, size, value) in enumerate(items):
            staged = ""
            if value and self.data_prefixes[tier]:
                staged = f"{self.prefix}s:{token}:{k}"
                pipe.set(staged, value, px=defaults.STAGED_VALUE_TTL_MS)
            flat += [int(index), LETTER[tier], int(size), staged]
        caps = [self.capacity[t] for t in TIERS]
        argv = self._argv(
            "admit",
            job,
            self.policy,
            self.overhead,
            *self._prefixes(),
            *caps,
            self._seed(),
            defaults.EVICTION_ROUNDS,
            defaults.EVICTION_CANDIDATES,
            self.pin_lease_ms,
            *flat,
        )
        pipe.evalsha(self._sha, 0, *argv)
        replies = pipe.execute(raise_on_error=False)
        out = replies[-1]
        if isinstance(out, redis.exceptions.NoScriptError):
            out = self.client.eval(_SCRIPT, 0, *argv)  # the staged values are still there
        elif isinstance(out, Exception):
            raise out
        return [int(v) for v in out]

    # -- inspection -------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """Entries and units held per tier, and the number of live jobs."""
        vals = [int(v) for v in self._call("state", "")]
        out: dict[str, object] = {}
        for k, tier in enumerate(TIERS):
            out[tier] = {"entries": vals[2 * k], "units": vals[2 * k + 1]}
        out["live_jobs"] = vals[-1]
        return out

    def memory(self) -> int:
        """Bytes Redis uses for this dataset's ODS metadata (MEMORY USAGE of its keys)."""
        total = 0
        for key in self.client.scan_iter(match=_glob(self.prefix) + "*", count=1000):
            total += int(self.client.memory_usage(key, samples=0) or 0)
        return total

    def clear(self) -> None:
        """Delete this dataset's ODS metadata."""
        keys = list(self.client.scan_iter(match=_glob(self.prefix) + "*", count=1000))
        for k in range(0, len(keys), 500):
            self.client.delete(*keys[k : k + 500])


def _glob(text: str) -> str:
    """``text`` with SCAN glob characters escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
