"""Server time per engine call, from Redis's SLOWLOG (for ``ods simulate``).

While a :class:`ServerTimes` is open, Redis logs every command that runs for at least
:data:`THRESHOLD_US` (its slow log) and the durations of the engine's function calls (``FCALL``)
are collected per command (``decide``, ``admit``, ...): the time each call held the server's
one thread, which every other client waited for. Calls the log does not hold took less than
the threshold: with the number of calls made (counted by the engine) they enter the
percentiles as 0. Redis 7 also logs the slow commands a function runs, which are skipped; a
threshold of 0 would log every one of them and slow the functions down. The log is read and
emptied every few batches, and the server's settings are restored on close. A server that
refuses ``CONFIG SET`` (managed Redis) gives no figures. The log holds every client's calls:
measure on a server nothing else uses (``ods simulate`` starts its own by default). On a Redis
Cluster every primary's log is read, and each primary's time in the engine's calls is kept
(:attr:`ServerTimes.busy`): the busiest one bounds how many calls the cluster serves a second.

:meth:`ServerTimes.noise` runs a script of constant work (:data:`NOISE`, a loop of arithmetic
of fixed length) whose times are collected under :data:`NOISE_NAME`: run
between the engine's calls, its spread (p99 over p50, max) is what the host alone adds to a
call's time.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping

import redis

from ods.routing import primaries

__all__ = ["NOISE", "NOISE_NAME", "THRESHOLD_US", "ServerTimes", "summarize"]

_LOG_LEN = 1_000_000
#: Calls faster than this (microseconds) are not logged.
THRESHOLD_US = 50
#: A script of constant work (no keys, no allocation), and the name its times are kept under.
NOISE = "local x = 0 for k = 1, 35000 do x = (x + k * 7) % 65521 end return x"
NOISE_NAME = "constant work (host noise)"


class ServerTimes:
    """Collects the server time (ms) of each engine call, per command."""

    def __init__(self, client: redis.Redis) -> None:
        self.nodes = primaries(client)
        self.ms: dict[str, list[float]] = defaultdict(list)
        #: per server (``routing.primaries`` order): ms it spent in the engine's calls
        self.busy = [0.0] * len(self.nodes)
        self._saved: list[dict[str, str]] | None = None
        self._noise_sha: str | None = None
        #: how many times :meth:`noise` ran its script
        self.noise_calls = 0

    def __enter__(self) -> ServerTimes:
        saved = []
        try:
            for node in self.nodes:
                got = node.config_get("slowlog-*")
                saved.append({k: got[k] for k in ("slowlog-log-slower-than", "slowlog-max-len")})
                node.config_set("slowlog-log-slower-than", THRESHOLD_US)
                node.config_set("slowlog-max-len", _LOG_LEN)
                node.slowlog_reset()
        except redis.ResponseError:  # not permitted: no figures
            self._restore(saved)
            return self
        self._saved = saved
        return self

    @property
    def active(self) -> bool:
        return self._saved is not None

    def _restore(self, saved: list[dict[str, str]]) -> None:
        for node, settings in zip(self.nodes, saved, strict=False):
            for key, value in settings.items():
                node.config_set(key, value)

    def noise(self) -> None:
        """Run the constant-work script once (its time is collected by :meth:`drain`)."""
        if not self.active:
            return
        first = self.nodes[0]  # (the host's noise: one server is enough)
        if self._noise_sha is None:
            self._noise_sha = first.script_load(NOISE)
        first.evalsha(self._noise_sha, 0)
        self.noise_calls += 1

    def drain(self) -> None:
        """Move the logged engine calls out of the slow logs."""
        if not self.active:
            return
        for k, node in enumerate(self.nodes):
            entries = node.execute_command("SLOWLOG", "GET", _LOG_LEN)
            node.slowlog_reset()
            for entry in entries:
                args = entry[3]
                if len(args) < 2:
                    continue
                name, first = bytes(args[0]).upper(), bytes(args[1]).decode(errors="replace")
                ms = int(entry[2]) / 1000
                if name == b"FCALL":
                    self.ms[first.rsplit("_", 1)[-1]].append(ms)
                    self.busy[k] += ms
                elif name == b"EVALSHA" and first == self._noise_sha:
                    self.ms[NOISE_NAME].append(ms)

    def __exit__(self, *exc: object) -> None:
        if self.active:
            self.drain()
            self._restore(self._saved or [])
            self._saved = None


def summarize(ms: dict[str, list[float]], calls: Mapping[str, int]) -> dict[str, dict]:
    """Per command of ``calls``: calls, p50, p99 and max server time (ms); the calls missing
    from ``ms`` took less than the threshold and count as 0."""
    out = {}
    for cmd, count in sorted(calls.items()):
        v = sorted(ms.get(cmd, []))
        v = [0.0] * max(0, count - len(v)) + v
        if not v:
            continue
        out[cmd] = {
            "calls": len(v),
            "p50": statistics.median(v),
            "p99": v[min(len(v) - 1, int(0.99 * len(v)))],
            "max": v[-1],
        }
    return out
