"""A sample's remaining work: what is left to do for a sample found in a tier (or in none).

A hit in the augmented tier needs only the transform's tail; a decoded hit also the random
transform's head; an encoded hit a decode first; a miss a read from storage too. What a sample
makes on its way is offered to the cache (:class:`Offers`), each tier's value in its own form
(``seneca.pipeline.codec``): the file's bytes, the decoded image, the augmented tensor.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

import torch
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from seneca.loader.source import HeadedSource, Source
from seneca.pipeline import codec
from seneca.pipeline.transforms import SplitTransform
from seneca_base.errors import CodecError
from seneca_base.tiers import SPLIT_ORDER, TIERS

log = logging.getLogger("seneca")

#: the forms made for a sample found in a tier (None: read from storage), in making order
_AFTER = {
    tier: SPLIT_ORDER[SPLIT_ORDER.index(tier) + 1 if tier else 0 :] for tier in (None, *TIERS)
}

__all__ = ["Offers", "SampleWork", "count_lookup"]


def _image_bytes(image: Any) -> int:
    """Bytes of a decoded image as the decoded tier stores it (0 when it is no PIL image or
    tensor)."""
    if isinstance(image, Image.Image):
        return image.width * image.height * len(image.getbands())
    if isinstance(image, torch.Tensor):
        return image.numel() * image.element_size()
    return 0


class Offers:
    """The values a batch offers the cache: each queued for admission while the batch's
    ``room`` (units per tier, updated) allows; the tiers in ``always`` are offered even when
    full (ODS decides what stays: it may evict copies live jobs need less), and a value past
    their room is written only once admitted (:attr:`later`); ``charge``: the units a value of
    so many bytes takes.

    A value is written with its offer (staged, before the admission decides) only while its
    tier's room would still hold ``reserve`` values like it after it: what the other
    processes writing to the cache may stage at once. Past that it is written once admitted,
    so that values staged together never fill the server's memory beyond the tiers' budgets
    (a staged value refused is memory the server had to hold meanwhile)."""

    def __init__(
        self,
        room: dict[str, int],
        charge: Any,
        always: Collection[str] = frozenset(),
        reserve: int = 0,
    ) -> None:
        self.room, self.charge, self.always, self.reserve = room, charge, always, reserve
        #: (index, tier, value) per value offered, in order
        self.items: list[tuple[int, str, bytes]] = []
        #: the positions in :attr:`items` of values offered past their tier's room
        self.later: list[int] = []
        self._least = charge(0)

    def offer(self, index: int, tier: str, value: Any, encoded: bool = False) -> bool:
        """Queue ``value`` (``encoded``: already a cache value) of sample ``index`` for
        ``tier``; False when it does not fit or the codec keeps no faithful copy of it."""
        room, always = self.room, tier in self.always
        if room.get(tier, 0) <= self._least and not always:
            return False
        try:
            data = value if encoded else codec.encode(value)
        except CodecError:  # a type, dtype or image mode the codec keeps no faithful copy of
            return False
        cost = self.charge(len(data))
        left = room.get(tier, 0)
        if left < cost:
            if not always:
                room[tier] = 0  # full for this batch: don't encode more values just to drop them
                return False
            self.later.append(len(self.items))
        elif left - cost < self.reserve * cost:
            self.later.append(len(self.items))
        room[tier] = max(0, left - cost)
        self.items.append((index, tier, data))
        return True

    def rest(self) -> Offers:
        """The offers of the rest of the batch, once these are admitted: none yet, the room
        that is left."""
        return Offers(self.room, self.charge, self.always, self.reserve)

    def refused(self) -> Offers:
        """Offers that take nothing: for the values of a sample that are not what the cache
        names (its files were made again)."""
        return Offers({}, self.charge)


class SampleWork:
    """How a dataset's samples are made: ``source`` (reads, decodes, targets), the user's
    ``transform`` split at the cache boundary, ``target_transform``; ``defer_tail``: the loader
    runs ``transform.batch_tail`` on collated batches, so samples end after
    ``transform.sample_tail``.

    A transform whose head is deterministic (``SplitTransform.fixed_head``) is folded into the
    source: the head's output is the sample's decoded form (``source.HeadedSource``), and the
    transform left is its tail. What the cache holds is named by :attr:`ids`, fixed when the
    work is made: samples changed since as a whole (:meth:`look_at_samples`) or a
    deterministic head set later make the dataset read from storage only (``stale`` says why);
    a sample whose files were made again is read from storage (:meth:`look_at_files`); a random
    head set later makes its crops anew, never taking the cache's (``old_view``). No value made
    by another transform or from other files is served."""

    def __init__(
        self,
        source: Source,
        transform: SplitTransform,
        target_transform: Any,
        defer_tail: bool = False,
    ) -> None:
        self.base = source
        self.target_transform = target_transform
        self.defer_tail = defer_tail
        self.source, self.transform = self._folded(transform)
        #: (dataset, view) as the cache names this work's values (``CachedDataset.cache_ids``)
        self.ids = (self.source.id, self.transform.fingerprint)
        #: what changed in the samples, or in how this process decodes them, since the ids were
        #: made (None: nothing seen)
        self.changed: str | None = None
        #: the files made again or changed since the ids were made, as first seen by
        #: :meth:`look_at_files` in this process (None: none seen)
        self.old_files: str | None = None

    def _folded(self, transform: SplitTransform) -> tuple[Source, SplitTransform]:
        if transform.fixed_head:
            head = HeadedSource(self.base, transform.head, transform.fingerprint)
            return head, transform.without_head()
        return self.base, transform

    def use_transform(self, transform: SplitTransform) -> None:
        """Make samples with ``transform`` from now on (the user set the dataset's)."""
        self.source, self.transform = self._folded(transform)

    def look_at_samples(self) -> bool:
        """Whether the samples changed since the ids were made (the source looks, where it
        looks at all its samples at once: ``Source.changed``), seen now or before: their cached
        values are then the old samples'."""
        if self.changed is None:
            self.changed = self.base.changed()
        return self.changed is not None

    def look_at_files(self, indices: Sequence[int]) -> set[int]:
        """Those of samples ``indices`` whose files were made again or changed since the ids
        were made (the source looks: a stat each, before their cached values are used; files
        made again while the loader lives, also while an epoch runs): their cached values are
        not theirs, and what is made of them is not the values the ids name. The first one seen
        is said in :attr:`old_files`. (None are looked at once the samples changed as a whole:
        :attr:`stale`, no value is read then.)"""
        if self.changed is not None:
            return set()
        found = self.base.changed_among(indices)
        if found and self.old_files is None:
            self.old_files = (
                "files of the dataset were made again or changed since SenecaLoader was made "
                f"({self.base.file_of(found[0])} the first seen)"
            )
        return set(found)

    def look_at_decoding(self) -> bool:
        """Whether this process decodes a sample otherwise than the cached values were decoded
        (``Source.decodes_otherwise``: a loader function or a library's setting changed,
        perhaps by a ``worker_init_fn`` in a worker), seen now or before."""
        if self.changed is None:
            self.changed = self.base.decodes_otherwise()
        return self.changed is not None

    @property
    def stale(self) -> str | None:
        """Why none of the cache's values are this work's (None: its encoded and decoded ones
        are): the samples changed, or the transform changed how a sample decodes (its
        deterministic head, folded into the source)."""
        if self.changed is not None:
            return f"{self.changed}: its cached values are not the dataset's now"
        if self.source.id != self.ids[0]:
            return (
                "the dataset's transform changed after SenecaLoader was made (or cannot be "
                "named to tell whether it did): its cached values are the old transform's"
            )
        return None

    @property
    def old_view(self) -> str | None:
        """Why the cache's augmented copies are not this work's (None: they are): the
        transform's random head changed (progressive resizing), or cannot be named to tell.
        Its encoded and decoded values still are, unless :attr:`stale`."""
        if self.transform.fingerprint != self.ids[1]:
            return (
                "the dataset's transform changed after SenecaLoader was made (or cannot be "
                "named to tell whether it did): its cached crops are the old transform's"
            )
        return None

    @property
    def tiers(self) -> tuple[str, ...]:
        """The tiers a sample can be read from: the encoded one when the source reads the
        encoded form, the augmented one when the transform has a head to cache."""
        out = []
        for tier in TIERS:
            if tier == "encoded" and not self.source.encoded:
                continue
            if tier == "augmented" and self.transform.head is None:
                continue
            out.append(tier)
        return tuple(out)

    @property
    def tensor_hits(self) -> bool:
        """Augmented hits are handed on as uint8 tensors (views of the cached bytes): the batch
        tail is deferred and the sample tail starts with ``PILToTensor``."""
        return self.defer_tail and self.transform.tensor_first

    def cached_value(self, value: bytes, tier: str, count: Counter) -> Any | None:
        """A cached ``value`` of ``tier`` decoded (None, counted and warned: a bad value)."""
        try:
            return codec.decode(value, image_tensor=tier == "augmented" and self.tensor_hits)
        except CodecError as err:
            count["cache_errors"] += 1
            log.warning("ignoring a bad cached %s value: %s", tier, err)
            return None

    def finish(
        self,
        index: int,
        tier: str | None,
        obj: Any,
        count: Counter,
        offers: Offers,
        aug_ok: bool,
    ) -> Any:
        """The remaining work for sample ``index`` found in ``tier`` as ``obj`` (None: read
        from storage), counted in ``count``: each form after ``tier`` made from the one before
        (:meth:`_made`), then the tail. What it makes is offered to ``offers``: a sample read
        from storage one base copy (the most processed form that fits), augmented copies
        only when ``aug_ok`` (another job may use them)."""
        # whether obj is PILToTensor's result (a view of a cache value's bytes)
        as_tensor = tier == "augmented" and isinstance(obj, torch.Tensor)
        if tier == "encoded" and obj is not None:  # the encoded bytes the decode reads
            count["bytes_encoded"] += len(obj)
        if tier != "augmented":
            made: dict[str, Any] = {}
            for form in _AFTER[tier]:
                if form == "augmented":
                    break
                obj = made[form] = self._made(form, index, obj, count)
            if tier is None:  # one base copy: the most processed form that fits, offered
                # (encoded) before the transform runs: a step may change its input in place
                for form in reversed(made):
                    if made[form] is not None and offers.offer(index, form, made[form]):
                        break
            if "augmented" in _AFTER[tier]:
                obj, as_tensor = self._augmented(index, obj, count, offers, aug_ok)
        tail = self.transform.sample_tail if self.defer_tail else self.transform.tail
        if as_tensor and self.transform.tensor_first:
            if self.defer_tail:
                tail = self.transform.after_tensor
            else:  # the user's collate_fn may write into it: hand over a copy
                obj, tail = obj.clone(), self.transform.after_tensor_all
        if tail is not None:
            obj = tail(obj)
        target = self.source.target(index)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return self.source.sample(obj, target)

    def _made(self, form: str, index: int, obj: Any, count: Counter) -> Any:
        """Sample ``index``'s ``form`` (a base tier's) made from the form before it, ``obj``:
        the encoded bytes read from storage (None when the source reads no encoded form), the
        decoded image from them."""
        if form == "encoded":
            start = time.perf_counter_ns()
            raw = self.source.read(index)
            count["ns_storage"] += time.perf_counter_ns() - start
            count["storage_reads"] += 1
            got = len(raw) if raw is not None else self.source.size(index)
            count["bytes_storage"] += got
            count["bytes_encoded"] += got
            return raw
        if form == "decoded":
            start = time.perf_counter_ns()
            image = self.source.decode(index, obj)
            count["ns_decode"] += time.perf_counter_ns() - start
            count["decodes"] += 1
            count["bytes_decoded"] += _image_bytes(image)
            return image
        raise ValueError(f"no step makes the {form} form")

    def _augmented(
        self, index: int, image: Any, count: Counter, offers: Offers, aug_ok: bool
    ) -> tuple[Any, bool]:
        """The augmented form of a decoded ``image`` (the transform's head, then PILToTensor
        when the tail starts with it), offered when ``aug_ok``; and whether it is a tensor."""
        obj, as_tensor = image, False
        start = time.perf_counter_ns()
        if self.transform.head is not None:
            obj = self.transform.head(obj)
            count["transforms"] += 1
        # the tail starts with PILToTensor: run it here, as the value the tier would store
        to_tensor = self.transform.tensor_first and isinstance(obj, Image.Image)
        value = _tensor_value(obj) if to_tensor else None
        if value is not None:
            obj, as_tensor = codec.decode(value), True
            count["bytes_augmented"] += len(value)
            count["augmented_made"] += 1
        if self.transform.head is not None:
            count["ns_transform"] += time.perf_counter_ns() - start
        if aug_ok and self.transform.head is not None:
            if value is not None:
                offers.offer(index, "augmented", value, encoded=True)
            elif not to_tensor:  # an image the codec cannot store as a tensor: not cached
                offers.offer(index, "augmented", obj)
        return obj, as_tensor


def _tensor_value(img: Image.Image) -> bytes | None:
    """``PILToTensor(img)`` as a cache value (C x H x W, contiguous): both what the
    augmented tier stores and, decoded, what the rest of the tail gets. None for images
    whose tensor the codec cannot store (uint16 modes)."""
    value = codec.encode_image_chw(img)
    if value is None:  # other modes: torchvision's own conversion
        try:
            value = codec.encode(pil_to_tensor(img).contiguous())
        except CodecError:
            return None
    return value


def count_lookup(tier: str | None, count: Counter) -> None:
    """Count a sample found in ``tier`` (None: in none): a hit there, a miss in each tier
    looked up before it."""
    for name in TIERS:
        if tier == name:
            count[f"hits_{name}"] += 1
            return
        count[f"misses_{name}"] += 1
