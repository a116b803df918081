"""One epoch run in pieces, saved and resumed between them: the helper every resume test
goes through."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from seneca_base.stateful import Stateful

#: ``start(state)``: a fresh holder of state (``state`` loaded into it unless None) and an
#: iterator over the sample indices of its next iteration's batches
Start = Callable[[Any], tuple[Stateful, Iterator[Sequence[int]]]]


def through_resumes(start: Start, stops: Iterable[int]) -> tuple[collections.Counter, Stateful]:
    """Run one epoch: for each ``k`` in ``stops`` a fresh holder (resumed from the state the
    one before saved) takes ``k`` batches and saves its state; a last one takes the rest.
    Returns how often each sample came, and the last holder."""
    seen: collections.Counter = collections.Counter()
    state = None
    for k in stops:
        holder, batches = start(state)
        for _ in range(k):
            seen.update(next(batches))
        state = holder.state_dict()
        assert isinstance(holder, Stateful) and state["batches"] == k
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    holder, batches = start(state)
    for batch in batches:
        seen.update(batch)
    return seen, holder
