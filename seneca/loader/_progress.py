"""Where a loader is in its epoch: the epoch and the batches of it the training loop took,
counted as batches are yielded (what ``SenecaLoader.state_dict`` saves)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from seneca.loader._ahead import closing

__all__ = ["EpochProgress"]


class EpochProgress:
    """The latest iteration's epoch and batches taken; an abandoned iteration counts no more
    once a newer one has begun."""

    def __init__(self) -> None:
        #: (epoch, batches taken in it); None before the first iteration or resume
        self.at: tuple[int, int] | None = None
        self._latest: object | None = None

    def begin(self, epoch: int) -> object:
        """A new iteration starts ``epoch``: the token its :meth:`tracked` counts under."""
        self.at = (epoch, 0)
        self._latest = token = object()
        return token

    def tracked(self, it: Iterator[Any], token: object, sampler: Any) -> Iterator[Any]:
        """The batches of ``it``, counted while ``token``'s iteration is the latest;
        ``sampler.current``: the epoch it runs (known once the first batch is decided)."""
        epoch = None
        with closing(it):  # a loop cut short stops the thread making the next batch at once
            for batch in it:
                if epoch is None:
                    epoch = sampler.current
                if self._latest is token:
                    self.at = (epoch, self.at[1] + 1 if self.at else 1)
                yield batch
        if self._latest is token and epoch is not None:
            self.at = (epoch + 1, 0)
