"""The kinds of process a loader's code runs in, declared once.

* **training**: the user's process, which runs the training loop and the loader's batch path
  (the ODS decisions, the merge, the batch tail or the copy to the device; ``_batch_path``);
* **worker**: a DataLoader worker process, which makes the batches it is handed (with
  tickets, in their slots) and sends them to the training process.

The code that behaves differently by role gets a :class:`Role` passed in: where rows are made
(shared memory in a worker, for the trip to the training process), when a batch's pins are
released (in a worker, in the batch's own round trip, as the worker may exit after it), and
which row of the shared counters a process writes. :func:`current` is the one place that asks
torch which role this process has (``get_worker_info``), once per call of the dataset. Whether
a process was forked from the one that made an object, or is starting a child, is
``seneca_base.process``'s to say.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import get_worker_info

__all__ = ["TRAINING", "Role", "current"]


@dataclass(frozen=True)
class Role:
    """A process's role: ``kind`` ("training" or "worker") and, for a worker, its id."""

    kind: str
    index: int = 0

    @property
    def worker(self) -> bool:
        """Whether this is a DataLoader worker (whose results cross to the training process)."""
        return self.kind == "worker"

    @property
    def row(self) -> int:
        """This process's row of the shared counters: 0 for the training process, k + 1 for
        worker k."""
        return self.index + 1 if self.worker else 0


#: the training process
TRAINING = Role("training")


def current() -> Role:
    """The role of the calling process."""
    info = get_worker_info()
    return TRAINING if info is None else Role("worker", info.id)
