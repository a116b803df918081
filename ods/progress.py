"""Where a training loop is in an ODS epoch: the epoch and the batches of it the loop took,
counted as batches are handed over (what a loader's ``state_dict`` saves, with the samples of
those batches: :meth:`ods.sampler.OdsBatchSampler.state_dict`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["EpochProgress"]


class EpochProgress:
    """The latest iteration's epoch and batches taken; an abandoned iteration counts no more
    once a newer one has begun. A :class:`seneca_base.stateful.Stateful`: its state is
    ``{"epoch": e, "batches": b}`` (empty before any iteration or resume)."""

    def __init__(self) -> None:
        #: (epoch, batches taken in it); None before the first iteration or resume
        self.at: tuple[int, int] | None = None
        self._latest: object | None = None

    def begin(self, epoch: int) -> object:
        """A new iteration starts ``epoch``: the token its :meth:`tracked` counts under."""
        self.at = (epoch, 0)
        self._latest = token = object()
        return token

    def tracked(
        self, it: Iterator[Any], token: object, current: Callable[[], int | None]
    ) -> Iterator[Any]:
        """The batches of ``it``, counted while ``token``'s iteration is the latest;
        ``current()``: the epoch it runs (known once the first batch is decided)."""
        epoch = None
        try:
            for batch in it:
                if epoch is None:
                    epoch = current()
                if self._latest is token:
                    self.at = (epoch, self.at[1] + 1 if self.at else 1)
                yield batch
        finally:  # a loop cut short stops the thread making the next batch at once
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if self._latest is token and epoch is not None:
            self.at = (epoch + 1, 0)

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch": e, "batches": b}``: the loop took ``b`` batches of epoch ``e`` (empty
        before any iteration or resume)."""
        if self.at is None:
            return {}
        return {"epoch": self.at[0], "batches": self.at[1]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The loop is back in ``state["epoch"]``; batches count again from 0 (those taken
        before are the resumed state's)."""
        self.at = (int(state["epoch"]), 0)
        self._latest = None
