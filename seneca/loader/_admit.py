"""What a fetch gives back to the cache: the admit part of a fetch (``_fetch``).

One call offers a batch's new values to the cache (its policy decides what stays, and may
evict for them: values are offered to a full encoded or augmented tier too) and ends the
pending of the decided misses made without a value to offer (``ods/functions/pending.lua``).
The renames and deletions that finish the admission are posted to the outbox (sent at once,
replies read at the next fetch). Entries whose values were missing, corrupt or foreign are
forgotten here too, so that a later miss caches the sample again.
"""

from __future__ import annotations

from collections import Counter

from ods.admission import REFUSED
from ods.routing import CACHE_FAILURES
from seneca.loader._link import CacheLink
from seneca.loader._samples import Offers

__all__ = ["Admitter"]


class Admitter:
    """Gives one dataset's new values, and its entries found bad, back to the cache through
    its ``link``."""

    def __init__(self, link: CacheLink) -> None:
        self.link = link

    def admit(self, offers: Offers, made: list[int], count: Counter, used: dict) -> None:
        """Offer the batch's new values, and end the pending of the decided misses ``made``
        that are not offered; the values offered past their tier's room are written once
        admitted. A value the server refused to store is a cache error, and the budgets shrink
        (the tiers held ``used`` at this batch's read)."""
        admit = offers.items
        if made and admit:
            offered = {i for i, _, _ in admit}
            made = [i for i in made if i not in offered]
        if not admit and not made:
            return
        link = self.link
        store = link.store
        items = [(i, t, store.charge(len(v)), v) for i, t, v in admit]
        try:
            result = store.admit(link.job, items, wait=False, made=made, later=offers.later)
        except CACHE_FAILURES as err:
            link.failed(err, count)
            return
        for (_, t, _), ok in zip(admit, result, strict=True):
            if ok == 1:
                count[f"admitted_{t}"] += 1
            elif ok == 0:
                count[f"full_{t}"] += 1
            elif ok == REFUSED:
                count["cache_errors"] += 1
        if REFUSED in result:
            link.refused(used, result.count(REFUSED))

    def forget(self, bad: list[tuple[str, int]], count: Counter) -> None:
        """Drop the entries whose values were missing, corrupt or foreign (read from storage):
        their values are deleted, and the samples may be cached again."""
        try:
            self.link.store.forget(self.link.job, bad)
        except CACHE_FAILURES as err:
            self.link.failed(err, count)
