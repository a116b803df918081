"""What a dataset's store answers, whichever form it takes: :class:`Store`.

A dataset's metadata is kept in one store (:class:`ods.store.OdsStore`) or, past one shard's
size, in shards behind one (:class:`ods.shards.ShardedStore`; ``ods.shards.open_store``
chooses). The loader, the sampler and the planner name a store only by this protocol, and call
it in the dataset's indices; ``tests/ods/test_store_api.py`` checks that both forms have every
member, each with this signature, and nothing public beside it but the extras it names.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload, runtime_checkable

from ods.decision import Decision, Pick
from ods.keys import Keys
from ods.outbox import Outbox, Poster
from seneca_base.split import Split

if TYPE_CHECKING:
    from ods.store import Glance

__all__ = ["Pending", "Store"]


class Pending(Protocol):
    """A decision posted (:meth:`Store.decide`, ``later=True``), collected by
    :meth:`Store.collect`."""

    @property
    def sent(self) -> bool: ...

    def cancel(self) -> bool: ...


@runtime_checkable
class Store(Protocol):
    """The operations of one dataset's store (see the module docstring); ``OdsStore``'s
    docstrings say what each does."""

    #: the dataset's samples
    samples: int
    #: where the store's calls wait to go out after a batch's read
    outbox: Outbox

    # what the store is: its keys (the dataset's own), client, lease, policy and budgets

    @property
    def keys(self) -> Keys: ...

    @property
    def client(self) -> Any: ...

    @property
    def lease_ms(self) -> int: ...

    @property
    def policy(self) -> str: ...

    @property
    def values(self) -> bool: ...

    @property
    def capacity(self) -> dict[str, int]: ...

    @property
    def budget_total(self) -> int: ...

    @property
    def decide_chunk(self) -> int: ...

    def now_ms(self) -> int: ...

    def reseed(self, seed: int) -> None: ...

    def refresh_jobs(self) -> list[str]: ...

    # a job's life

    def join(self, job: str, indices: Sequence[int] | None = None) -> tuple[int, int]: ...

    def leave(self, job: str) -> None: ...

    def renew(self, job: str) -> bool: ...

    def lease_end(self, job: str) -> int | None: ...

    def lapse(self, job: str) -> None: ...

    def start_epoch(self, job: str, epoch: int) -> tuple[int, int]: ...

    def restore(self, job: str, epoch: int, consumed: bytes) -> int: ...

    # batches: decided now, or posted and collected; looked up; released (each form's
    # decide returns the same as these overloads say, typed as the union)

    @overload
    def decide(
        self,
        job: str,
        batch: int,
        substitute: bool = True,
        epoch: int | None = None,
        *,
        later: Literal[False] = False,
    ) -> Decision: ...

    @overload
    def decide(
        self,
        job: str,
        batch: int,
        substitute: bool = True,
        epoch: int | None = None,
        *,
        later: Literal[True],
    ) -> Pending: ...

    def decide(
        self,
        job: str,
        batch: int,
        substitute: bool = True,
        epoch: int | None = None,
        *,
        later: bool = False,
    ) -> Decision | Pending: ...

    def collect(self, posted: Pending, /) -> Decision | None: ...

    def lookup(self, job: str, indices: Sequence[int]) -> Decision: ...

    def release(
        self, job: str, picks: Decision | Sequence[Pick], via: Poster | None = None
    ) -> list[int]: ...

    def claim(
        self, job: str, read: Sequence[int], waiting: Sequence[int] = ()
    ) -> tuple[list[int], list[int]]: ...

    def swap(self, job: str, epoch: int, misses: Sequence[int]) -> list[Pick]: ...

    def forget(self, job: str, entries: Sequence[tuple[str, int]]) -> list[int]: ...

    # values and their admission

    def charge(self, size: int) -> int: ...

    def value_key(self, tier: str, index: int) -> str: ...

    def value_keys(self, items: Iterable[tuple[str, int]]) -> list[str]: ...

    def glance_commands(self, indices: Sequence[int]) -> list[tuple]: ...

    def glance(self, indices: Sequence[int], replies: Sequence[Any]) -> Glance: ...

    def room(self, glance: Glance) -> dict[str, int]: ...

    def admit(
        self,
        job: str,
        items: Sequence[tuple[int, str, int, bytes]],
        wait: bool = True,
        made: Sequence[int] = (),
        later: Collection[int] = (),
    ) -> list[int]: ...

    def cached(self, tier: str, indices: Sequence[int]) -> list[bool]: ...

    # budgets, the dataset's registration, inspection

    def apply_split(self, split: Split, size: int) -> None: ...

    def budgets_command(self) -> tuple[str, ...]: ...

    def adopt_budgets(self, reply: Sequence[object]) -> bool: ...

    def publish_budgets(self, job: str, version: int | None = None) -> bool: ...

    def fit_budgets(self, job: str, total: int) -> None: ...

    def shrink(self, job: str, capacity: Mapping[str, int]) -> dict[str, int]: ...

    def live_command(self) -> tuple[object, ...]: ...

    def same_view(self, names: Sequence[bytes | bytearray | str]) -> int: ...

    def register(self, about: str) -> None: ...

    def state(self) -> dict[str, object]: ...

    def usage(self) -> dict[str, int]: ...

    def memory(self) -> int: ...

    def clear(self) -> int: ...
