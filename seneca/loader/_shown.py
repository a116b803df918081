"""What a loader whose batches come from ODS shows as its ``sampler``.

ODS's samples one by one (``ods.sampler.OdsSampler``: iterating it runs an epoch). In a
data-parallel job (ranks > 1) that sampler is a ``DistributedSampler`` as well, which it is in
effect: ODS gives each rank its part of every epoch (``ceil(n / world_size)`` samples) and the
ranks together each sample once. Frameworks that put a ``DistributedSampler`` into any loader
whose sampler is not one (PyTorch Lightning's ``use_distributed_sampler``, on by default) then
leave the loader as it is, as they leave one that already has a ``DistributedSampler``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler

from ods.sampler import OdsBatchSampler, OdsSampler

__all__ = ["OdsDistributedSampler", "shown_sampler"]


class OdsDistributedSampler(DistributedSampler):
    """:class:`~ods.sampler.OdsSampler` of a job's rank, with DistributedSampler's attributes
    (``num_replicas``, ``rank``, ``epoch``, ``num_samples``, ``total_size``, ``shuffle``)."""

    def __init__(self, batches: OdsBatchSampler, dataset: Any) -> None:
        # not DistributedSampler.__init__: the ranks and sizes are ODS's, not the dataset's
        self.samples = OdsSampler(batches)
        self.dataset = dataset
        self.num_replicas, self.rank = batches.num_replicas, batches.rank
        self.epoch = batches.epoch
        self.shuffle, self.seed, self.drop_last = True, 0, False

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        return len(self.samples)

    @property
    def total_size(self) -> int:  # type: ignore[override]
        return self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        return iter(self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.samples.set_epoch(epoch)


def shown_sampler(batches: OdsBatchSampler, dataset: Any) -> OdsSampler | OdsDistributedSampler:
    """The sampler a loader over ``batches`` shows (see the module docs)."""
    if batches.num_replicas > 1:
        return OdsDistributedSampler(batches, dataset)
    return OdsSampler(batches)
