"""The schedule of an ``ods simulate`` run: which job asks for a batch when, whatever the cache
holds, so that every policy and baseline (and the ceiling, ``ods.ceiling``) sees the same run.

Each job has a virtual clock that starts at its start time and advances 1 / speed per call; the
job with the earliest clock calls next (ties: the lower job number). A job calls once per batch
of its epoch, and once more to find the epoch over (``Step.served`` 0), for each of its epochs.
With ``together`` W > 1 a job's calls come W at a time (its clock advances W / speed after the
W-th), as a loader's W workers that started together and take as long per batch decide their
batches together.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Step", "calls_per_epoch", "schedule"]


@dataclass(frozen=True)
class Step:
    """One call of a run: the job that makes it, its epoch, and the samples it is served (0:
    the call that finds the epoch over; after its last epoch's, the job leaves)."""

    job: int
    epoch: int
    served: int


def calls_per_epoch(samples: int, batch: int) -> int:
    """Calls a job makes per epoch: its batches, and the one that finds the epoch over."""
    return -(-samples // batch) + 1


def schedule(
    samples: int,
    batch: int,
    epochs: int,
    speeds: list[float],
    starts: list[float] | None = None,
    max_calls: int | None = None,
    together: int = 1,
) -> list[Step]:
    """The calls of a run in order (at most ``max_calls``); ``starts``: each job's start time,
    in epochs of a job of speed 1 (default: all start at once); ``together``: calls a job
    makes at a time."""
    per_epoch = calls_per_epoch(samples, batch)
    clocks = [s * per_epoch for s in starts or [0.0] * len(speeds)]
    epoch = [0] * len(speeds)
    left = [samples] * len(speeds)
    made = [0] * len(speeds)
    active = set(range(len(speeds)))
    steps: list[Step] = []
    while active and (max_calls is None or len(steps) < max_calls):
        k = min(active, key=lambda k: (clocks[k], k))
        made[k] += 1
        if made[k] % together == 0:
            clocks[k] += together / speeds[k]
        served = min(batch, left[k])
        steps.append(Step(k, epoch[k], served))
        left[k] -= served
        if served == 0:
            epoch[k] += 1
            left[k] = samples
            if epoch[k] >= epochs:
                active.discard(k)
    return steps
