"""The fewest storage loads any cache policy can make in an ``ods simulate`` run, and the hit
rate they leave: the ceiling the policies are measured against.

A run's schedule (``ods.schedule``) fixes when each job asks for each batch, whatever the cache
holds. A policy chooses only which samples a batch holds, what the cache keeps and what it
loads from storage (misses, or samples nobody asked for yet: prefetch). The bound:

* Over a stretch of calls [s, e] inside one epoch of one job, the job is served m distinct
  samples. Each was in the cache just before call s or is loaded during [s, e], so at least m
  minus what the cache held before s are loaded in the stretch. The cache holds nothing before
  the first call (a job's first epoch, counted from the first call of the run, loads all it is
  served) and at most its capacity later.
* Loads in stretches that do not overlap are different loads: the fewest loads of the run are
  at least the largest sum over stretches no two of which overlap (a weighted interval
  scheduling, solved exactly here).

The stretches are each job's epochs and, from the call after any epoch of any job ends, the rest
of each job's epoch. A hit saves a load unless the sample was prefetched for it, so the hits
that save loads are at most the samples served less the fewest loads.

For equal speeds and jobs that start together the bound is ``N + (E - 1)(N - C)`` loads (N
samples, E epochs, a cache of C samples): every sample is loaded in the first epoch, and each
later epoch loads what the cache could not carry over. The ceiling ``1 - (1 + (E - 1)(1 - c)) /
(J E)`` tends to ``(J - 1 + c) / J`` as epochs are added.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ods.schedule import Step

__all__ = ["Ceiling", "ceiling", "crop_ceiling"]


@dataclass(frozen=True)
class Ceiling:
    """The fewest storage loads of a run, and the hit rate they leave."""

    loads: int
    served: int

    @property
    def hit_rate(self) -> float:
        return 1 - self.loads / self.served if self.served else 0.0


def ceiling(steps: list[Step], capacity: int) -> Ceiling:
    """The fewest loads of the run ``steps`` with a cache of ``capacity`` samples."""
    # per job and epoch: the positions of its batches, and the samples served before each
    runs: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for at, s in enumerate(steps):
        if s.served:
            where, before = runs.setdefault((s.job, s.epoch), ([], [0]))
            where.append(at)
            before.append(before[-1] + s.served)
    stretches = []  # (first call, last call, loads at least)
    for (_, epoch), (where, before) in runs.items():
        stretches.append((where[0], where[-1], _need(where[0], before[-1], capacity)))
        if epoch == 0:
            stretches.append((0, where[-1], before[-1]))
    for after in sorted({last + 1 for _, last, _ in stretches}):
        for where, before in runs.values():
            k = bisect.bisect_left(where, after)
            if 0 < k < len(where):
                rest = before[-1] - before[k]
                stretches.append((where[k], where[-1], _need(where[k], rest, capacity)))
    served = sum(s.served for s in steps)
    return Ceiling(loads=_heaviest_disjoint(stretches), served=served)


def crop_ceiling(steps: list[Step], capacity: int) -> Ceiling:
    """The fewest loads of the run ``steps`` when the cache holds crops only (a job reads each
    copy at most once and never one it made): :func:`ceiling`, or, when larger, what the
    busiest job is served (each sample it is served is a load of its own or a copy new to it,
    a different load each time)."""
    best = ceiling(steps, capacity)
    served: dict[int, int] = {}
    for s in steps:
        served[s.job] = served.get(s.job, 0) + s.served
    return Ceiling(loads=max(best.loads, max(served.values(), default=0)), served=best.served)


def _need(first: int, served: int, capacity: int) -> int:
    """Loads at least, of a stretch from call ``first`` in which ``served`` samples are served."""
    return max(0, served - (0 if first == 0 else capacity))


def _heaviest_disjoint(stretches: list[tuple[int, int, int]]) -> int:
    """The largest total weight of stretches (first, last, weight) no two of which overlap."""
    stretches = sorted(stretches, key=lambda x: x[1])
    lasts = [last for _, last, _ in stretches]
    best = [0] * (len(stretches) + 1)  # best[k]: over the k stretches that end first
    for k, (first, _, weight) in enumerate(stretches):
        earlier = bisect.bisect_left(lasts, first)  # the stretches that end before this one
        best[k + 1] = max(best[k], weight + best[earlier])
    return best[-1]
