"""A decided batch's samples made from what was read: the make part of a fetch (``_fetch``).

Each value read is taken up at its tier (an augmented tensor read into its row needs only its
target), each miss read from storage, and the rest of each sample's work done by
``_samples.SampleWork``, which offers the new values to the cache as it goes. Nothing here
talks to the cache: a value that cannot be taken up (corrupt, or another version's) is a miss,
and the maker says which entries held such values. Before it uses a batch's values it has the
source look at their files (``SampleWork.look_at_files``): a sample whose files were made again
since its values were cached is a miss, the entries of its values read are dropped (a loader
made later, to which the new files look as the old ones did, is not served them), and none of
what is made of it is offered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from ods.decision import Pick
from seneca._cache.resp import Placed
from seneca.loader._rows import BatchRows, RowBatch
from seneca.loader._samples import Offers, SampleWork, count_lookup

__all__ = ["Maker"]


class Maker:
    """Makes the samples of one dataset's batches by ``work``."""

    def __init__(self, work: SampleWork) -> None:
        self.work = work

    def samples(
        self,
        picks: Sequence[Pick],
        values: list,
        count: Counter,
        rows: BatchRows | None,
        offers: Offers,
        aug_ok: bool,
        skip: Collection[int] = (),
        only: Collection[int] | None = None,
    ) -> tuple[list[Any], list[tuple[str, int]]]:
        """The batch's samples from what was read: the remaining work per sample, and the
        (tier, index) of the values that could not be taken up or were made of files made again
        (made as misses; their entries go). Positions in ``skip``, or not in ``only``, are left
        None (made by another call)."""
        work = self.work
        # a hit read into its row needs nothing more than its target when no step follows
        # PILToTensor: the common case, kept to a few operations per sample
        plain = work.transform.after_tensor is None and work.target_transform is None
        views = rows.rows.unbind(0) if rows is not None and rows.rows is not None else ()
        label = work.source.target
        # the transform's random head changed: the cached crops, read or claimed, are the
        # old head's, and are made anew
        old_crops = work.old_view is not None
        # samples whose files were made again since the cache's values were named (while the
        # loader lives): their values read are not used and their entries go, each is read
        # from storage, and nothing made of it is offered
        making = [
            p.index for k, p in enumerate(picks) if k not in skip and (only is None or k in only)
        ]
        old_files = work.look_at_files(making)
        refused = offers.refused() if old_files else offers
        whole = not skip and only is None and not old_crops and not old_files
        if plain and len(views) == len(picks) > 0 and whole:
            whole = _all_placed(picks, values, rows.rows, views, label, count)
            if whole is not None:
                return whole, []
        out, bad = [], []
        placed = placed_bytes = 0
        for k, (p, (tier, value)) in enumerate(zip(picks, values, strict=True)):
            if k in skip or (only is not None and k not in only):
                out.append(None)
                continue
            old_file = p.index in old_files
            if old_file and value is not None:
                bad.append((tier, p.index))  # the old file's: the entry goes
            if (old_crops and tier == "augmented") or old_file:
                tier, value = None, None
            if isinstance(value, Placed):
                if plain:
                    out.append((views[k], label(p.index)))
                    placed += 1
                    placed_bytes += value.size
                    continue
                obj, size = views[k], value.size
            else:
                obj = work.cached_value(value, tier, count) if value is not None else None
                size = len(value) if obj is not None else 0
                if value is not None and obj is None:
                    bad.append((tier, p.index))
            if obj is None:
                tier = None
            count_lookup(tier, count)
            count["bytes_cache"] += size
            took = refused if old_file else offers
            sample = work.finish(p.index, tier, obj, count, took, aug_ok and not old_file)
            out.append(rows.settle(k, sample) if rows is not None else sample)
        count["hits_augmented"] += placed  # what count_lookup counts for an augmented hit
        count["bytes_cache"] += placed_bytes
        return out, bad


def _all_placed(
    picks: Sequence[Pick],
    values: list,
    rows: Any,
    views: Sequence[Any],
    label: Any,
    count: Counter,
) -> RowBatch | None:
    """The samples of a batch every value of which was read into its row of ``rows``, in
    order (``views`` of them), marked so that ``collate_rows`` takes the rows as they are;
    None for any other batch."""
    if not all(type(v) is Placed for _, v in values):
        return None
    count["hits_augmented"] += len(picks)  # what samples counts for each such hit
    count["bytes_cache"] += sum(v.size for _, v in values)
    labels = [label(p.index) for p in picks]
    return RowBatch(rows, zip(views, labels, strict=True))
