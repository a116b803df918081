"""Engine: how a store calls the engine's functions for one dataset.

A call is one ``FCALL`` with every key it may touch declared (``ods.keys``) and the common
arguments every function reads first (``ods/functions/lib.lua``). A call that fails because the
library is not loaded (a restarted or flushed server) or because it declared other live jobs
than the dataset has is made again after loading the library or reading the live jobs; other
error replies are raised as their typed exceptions. The values a call names for deletion are
deleted by the caller (:meth:`Engine.unlink_values`).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis

from ods import defaults, routing
from ods.functions import FUNCTIONS, SOURCE, error_of
from ods.keys import Keys
from ods.outbox import Outbox
from seneca_base.errors import ForeignDataError, FunctionsMissingError, StaleJobsError
from seneca_base.process import Made, current
from seneca_base.tiers import tier_of_letter

__all__ = ["Engine"]

_log = logging.getLogger("seneca.ods")


class Engine:
    """The function calls of one dataset's cache (see the module docstring); ``OdsStore``
    builds its commands on it.

    Args:
        client: a redis-py client (decode_responses must be False), or an object whose
            ``redis`` attribute gives one per process (the engine then pickles into
            DataLoader workers).
        keys: the dataset's key schema (and the caller's view).
        policy: the cache policy the calls that serve, release and admit name.
        capacity: per tier, the units it may hold (the budgets an admission is decided by;
            the store changes them as budgets change).
        values: sample values are stored (payload-free otherwise).
        pin_lease, orphan_grace, job_forget: seconds (see ``ods.defaults``).
        seed: seed of the random numbers the functions get (None: from the OS).
        outbox: the outbox its later-read calls go through (None: one of its own).
    """

    def __init__(
        self,
        client: Any,
        keys: Keys,
        *,
        policy: str,
        capacity: dict[str, int],
        values: bool,
        pin_lease: float,
        orphan_grace: float,
        seed: int | None,
        job_forget: float | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        self._source = client
        self.keys = keys
        self.policy = policy
        self.capacity = capacity
        self.values = bool(values)
        self.pin_lease_ms = int(pin_lease * 1000)
        self.orphan_grace_ms = int(orphan_grace * 1000)
        forget = defaults.JOB_FORGET if job_forget is None else job_forget
        self.forget_ms = int(forget * 1000)
        self._seed_value = seed
        self._streams(seed)
        self._offset_ms: int | None = None  # the server's clock minus this host's
        self._jobs: list[str] = []  # the live jobs as last seen (declared to the functions)
        #: function calls this engine made, per command (``ods simulate`` reports server time)
        self.commands: Counter[str] = Counter()
        #: calls of this process whose replies are read later (see ``ods.outbox``; shared
        #: with other stores where given)
        self.outbox = Outbox(client) if outbox is None else outbox

    @property
    def client(self) -> redis.Redis:
        """The redis-py client of this process."""
        return routing.client_of(self._source)

    @property
    def prefix(self) -> str:
        """The prefix of this dataset's metadata keys."""
        return self.keys.meta

    def reseed(self, seed: int) -> None:
        """Draw the functions' random seeds from ``seed`` from now on (a job that starts on an
        empty cache with the same seeds makes the same choices)."""
        self._seed_value = int(seed)
        self._streams(int(seed))

    def now_ms(self) -> int:
        """The server's clock (ms), from this host's and their difference measured once (TIME):
        every lease, pin bucket and expiry is on the server's clock, so hosts whose clocks
        differ never expire each other's leases or unpin each other's samples."""
        if self._offset_ms is None:
            before = time.time()
            seconds, micros = self.client.time()
            after = time.time()
            self._offset_ms = round(seconds * 1000 + micros / 1000 - (before + after) * 500)
        return int(time.time() * 1000) + self._offset_ms

    def _streams(self, seed: int | None) -> None:
        self._rng = random.Random(seed)
        self._admissions = random.Random(None if seed is None else ~seed)
        self._made = Made()

    def _forked(self) -> None:
        if self._made.inherited:  # a forked worker: random streams of its own
            base = self._seed_value
            self._streams(None if base is None else base + current())

    def _seed(self) -> int:
        """The seed of a decision's random choices."""
        self._forked()
        return self._rng.randrange(1, 2**31)

    def admission_seed(self) -> int:
        """The seed of an admission's random eviction probes: a stream of its own, so what a
        job admits does not change the choices of its decisions."""
        self._forked()
        return self._admissions.randrange(1, 2**31)

    def command(
        self, cmd: str, job: str, *args: object, jobs: bool = False, at: int | None = None
    ) -> tuple:
        """The FCALL of ``cmd`` for ``job``, to send in a pipeline (``jobs``: declare the live
        jobs as last seen; a StaleJobsError reply means: call it through :meth:`call`), made
        at the server time ``at`` (ms; default: now)."""
        now = self.now_ms() if at is None else int(at)
        declared = self._jobs if jobs else []
        job = self.keys.job_name(job)
        keys = self.keys.declared(job, now // self.pin_lease_ms, declared)
        argv = [now, job, self.pin_lease_ms, self.orphan_grace_ms, defaults.ORPHAN_COLLECT]
        argv += [int(self.values), self.forget_ms, len(declared), *declared, *args]
        self.commands[cmd] += 1
        return ("FCALL", FUNCTIONS[cmd], len(keys), *keys, *argv)

    def load(self) -> None:
        """Load the engine's functions into the server (the library's name carries its source's
        hash, so replacing a loaded copy changes nothing for other callers)."""
        self.client.function_load(SOURCE, replace=True)

    @property
    def declared_jobs(self) -> list[str]:
        """The live jobs as this engine last read them: the jobs its calls declare."""
        return list(self._jobs)

    def refresh_jobs(self) -> list[str]:
        """The dataset's live jobs, read now (and declared by later calls)."""
        now = self.now_ms()
        names = self.client.zrangebyscore(self.keys.jobs, now, "+inf")
        self._jobs = [n.decode() if isinstance(n, bytes) else n for n in names]
        return self._jobs

    def recover(self, err: Exception) -> bool:
        """Make a call that failed with ``err`` worth trying again: load the functions, refresh
        the live jobs, or delete a metadata key holding foreign data. False when ``err`` is not
        such a failure."""
        err = error_of(err)
        if isinstance(err, FunctionsMissingError):
            self.load()
        elif isinstance(err, StaleJobsError):
            self.refresh_jobs()
        elif isinstance(err, ForeignDataError) and err.key.startswith(self.keys.meta):
            _log.warning("deleting %s: it holds another type than the cache keeps there", err.key)
            self.client.delete(err.key)
        else:
            return False
        return True

    def call(
        self, cmd: str, job: str, *args: object, jobs: bool = False, at: int | None = None
    ) -> Any:
        """Run ``cmd`` now (loading the functions or refreshing the live jobs as needed), as
        made at the server time ``at`` when given; an error reply is raised as its typed
        exception."""
        for attempt in range(defaults.CALL_RETRIES + 1):
            try:
                return self._execute(self.command(cmd, job, *args, jobs=jobs, at=at))
            except redis.ResponseError as err:
                if attempt == defaults.CALL_RETRIES or not self.recover(err):
                    raise error_of(err) from None
        raise AssertionError("unreachable")

    def _execute(self, command: tuple) -> Any:
        """Run one command within its deadline; on a cluster, on the node of its first key
        (``ods.routing``)."""
        reply = routing.run(self.client, [command])[0]
        if isinstance(reply, Exception):
            try:
                raise reply
            finally:  # the error's traceback holds this frame (and its callers', the
                del reply  # loader's among them): no reference cycle through this variable
        return reply

    def unlink_values(self, evicted: Sequence[object], now: bool = True) -> list[int]:
        """Delete the values of evicted ``[letter, sample, ...]`` pairs (``now``: wait for it,
        else post it to the outbox); returns the samples."""
        pairs = list(zip(evicted[::2], evicted[1::2], strict=True))
        if not pairs:
            return []
        command = ("UNLINK", *(self.keys.value(tier_of_letter(t), i) for t, i in pairs))
        if self.values:
            if now:
                self._execute(command)
            else:
                self.outbox.send([command])
        return [int(i) for _, i in pairs]
