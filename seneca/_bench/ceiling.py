"""The fewest decodes any cache policy could have made in a real ``seneca bench`` run.

``ods.ceiling`` bounds the loads of a run from its timeline: which job asked for a batch of
how many samples, in which epoch, in what order. A Seneca job with workers records that
timeline itself (``seneca.loader.timeline``: when each batch was decided); the jobs' files,
merged on their common clock, are the run's timeline, each batch a call. A batch holds the
loader's batch size, but for the last one decided in an epoch, which holds what is left.

The cache's capacity in samples is what its tiers hold of the copies that save a decode: the
decoded tier's budget over a decoded image's bytes and the augmented tier's over a crop's
(uint8, 3 channels). Copies in the encoded tier save a storage read, not a decode, and count
for nothing here. The bound lets any cached sample serve any job, while Seneca's crops serve
only the jobs that did not make them: the ceiling is one no policy passes, not always one a
policy reaches.

When crops are the only copies that save a decode (no decoded tier), a second bound holds: a
job reads each crop at most once and never one it made, so each sample a job is served is a
decode of its own or a crop it never read, a different decode each time. The run then decodes
at least as many samples as its busiest job is served (1.0 per sample-epoch when every job
runs every epoch), whatever the cache holds; the ceiling is the larger of the two bounds.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ods.ceiling import ceiling, crop_ceiling
from ods.schedule import Step

__all__ = ["capacity", "decode_ceiling", "run_steps", "value_bytes"]


def run_steps(folder: Path, samples: int, batch: int) -> list[Step]:
    """The run's calls, in the order they were decided, from the timeline files in
    ``folder`` (one per job; one line per epoch)."""
    calls: list[tuple[float, int, int, int]] = []
    for job, path in enumerate(sorted(folder.glob("*.jsonl"))):
        for epoch, line in enumerate(path.read_text().splitlines()):
            decided = [b["decided"] for b in json.loads(line)["batches"] if "decided" in b]
            last = samples - batch * (len(decided) - 1)
            for k, at in enumerate(decided):
                calls.append((at, job, epoch, batch if k < len(decided) - 1 else last))
    return [Step(job, epoch, served) for _, job, epoch, served in sorted(calls)]


@functools.cache
def value_bytes(data: str, crop: int) -> dict[str, float]:
    """Bytes of a decoded image (the dataset's mean, RGB) and of a crop, uint8 3-channel."""
    from PIL import Image

    from seneca.pipeline.storage import Storage

    storage = Storage.from_folder(data)
    sizes = []
    for i in range(len(storage)):
        with Image.open(storage.path(i)) as image:  # the header only
            sizes.append(image.width * image.height * 3)
    return {"decoded": sum(sizes) / max(len(sizes), 1), "augmented": float(crop * crop * 3)}


def capacity(cache_bytes: int, split: dict[str, float], value_bytes: dict[str, float]) -> int:
    """Samples the cache holds of the copies that save a decode (see the module docstring)."""
    return int(
        sum(cache_bytes * split.get(t, 0.0) / value_bytes[t] for t in ("decoded", "augmented"))
    )


def decode_ceiling(
    folder: Path, samples: int, batch: int, epochs: int, copies: int, crops_only: bool = False
) -> dict[str, Any] | None:
    """The fewest decodes per sample-epoch of the run whose timeline is in ``folder``, with a
    cache of ``copies`` samples, all of them crops when ``crops_only`` (None: no
    timeline)."""
    steps = run_steps(folder, samples, batch)
    if not steps:
        return None
    loads = (crop_ceiling if crops_only else ceiling)(steps, copies).loads
    return {
        "decodes_per_sample_epoch": loads / (samples * epochs),
        "copies": copies,
        "crops_only": crops_only,
        "jobs": len({s.job for s in steps}),
        "calls": len(steps),
    }
