"""Splitting a transform into a cached head and a cheap deterministic tail.

The augmented tier stores the output of the *head* of a sample transform; the *tail* runs after
every fetch. Keeping dtype conversion and normalisation in the tail keeps cached values compact
(uint8 images instead of float32 tensors, 4x smaller) and lets them be shared by jobs that only
differ in normalisation.

How the split is found, for a ``Compose`` (torchvision v1 or v2):

* an explicit :class:`CacheBoundary` marker splits there: everything after it is the tail;
* otherwise the longest run of trailing steps of known deterministic types (``ToTensor``,
  ``PILToTensor``, ``ToImage``, ``ToDtype``, ``ConvertImageDtype``, ``Normalize``,
  ``ToPureTensor``) and of random steps on tensors (``RandomErasing``, :data:`RANDOM_TAIL`:
  drawn again at every fetch, as DataLoader draws it) becomes the tail. A ``ToDtype`` given a
  dtype per input type is not of them (``_UNLESS``): it converts by its input's type, and a
  collated batch or a cached tensor read back is a plain tensor.

Steps of other libraries that do what one of those torchvision steps does are known by an
explicit list (:data:`ACTS_AS`): timm's ``MaybeToTensor`` is a ``ToTensor``, its
``ResizeKeepRatio`` without random scale or aspect a ``Resize``, and so on. A test checks the
list against the installed timm's ``create_transform`` pipelines.

A head made only of deterministic steps of an explicit list (:data:`DETERMINISTIC_HEAD`:
``Resize``, ``CenterCrop``, ``Pad``, ``Grayscale`` and the tail's types, or a ``Compose`` of
them), as a validation transform's, gives the same output every time: SenecaLoader then keeps
that output as the sample's decoded form (``SplitTransform.fixed_head``), which every job and
every epoch reuses, and the transform has no random head to cache.

With the default collate function, SenecaLoader runs the *batch tail* (the trailing run of
``ToDtype``, ``ConvertImageDtype`` and ``Normalize`` steps) once per collated batch in the loader
process instead of once per sample in the workers: the same step objects on a stacked batch give
the same numbers, and the workers collate (and send through shared memory) uint8 images, 4x
fewer bytes than float32. A cached augmented image whose tail starts with ``PILToTensor`` is
handed on as a tensor view of the cached bytes, without making a PIL image first.

Example::

    transform = v2.Compose([
        v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor(),
        seneca.CacheBoundary(),          # cache uint8 CHW tensors ...
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std),   # ... and do this after
    ])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from seneca.pipeline.batch_tail import BatchTail
from seneca.pipeline.fingerprint import fingerprint

__all__ = [
    "ACTS_AS",
    "BATCH_TAIL",
    "DETERMINISTIC_HEAD",
    "DETERMINISTIC_TAIL",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RANDOM_TAIL",
    "CacheBoundary",
    "ColumnTransform",
    "SplitTransform",
    "default_train_transform",
    "split_transform",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Class names (in torchvision.transforms and .v2) that are moved to the tail automatically.
DETERMINISTIC_TAIL = frozenset(
    {
        "ToTensor",
        "PILToTensor",
        "ToImage",
        "ToImageTensor",
        "ToPureTensor",
        "ToDtype",
        "ConvertImageDtype",
        "Normalize",
    }
)

#: Random steps on tensors that run in the tail, per fetch, when they follow its conversions
#: (as ``RandomErasing`` follows ``Normalize``): the cached head then stays a uint8 image.
RANDOM_TAIL = frozenset({"RandomErasing"})

#: Tail steps that give the same numbers on a stacked (N, C, H, W) batch as per sample.
BATCH_TAIL = frozenset({"ToDtype", "ConvertImageDtype", "Normalize"})

#: Class names (in torchvision.transforms and .v2) whose output depends on their input only: a
#: head made of them (or of a Compose of them) is cached once as the sample's decoded form.
DETERMINISTIC_HEAD = DETERMINISTIC_TAIL | frozenset(
    {"Resize", "CenterCrop", "Pad", "Grayscale", "RGB", "ToPILImage"}
)


class CacheBoundary:
    """Marker inside a ``Compose``: steps before it are cached, steps after it run per fetch."""

    def __call__(self, x: Any) -> Any:
        return x

    def __repr__(self) -> str:
        return "CacheBoundary()"


def _fixed_scale(step: Any) -> bool:
    """timm's ``ResizeKeepRatio`` draws no random scale, aspect or interpolation."""
    return (
        not getattr(step, "random_scale_prob", 1)
        and not getattr(step, "random_aspect_prob", 1)
        and not isinstance(getattr(step, "interpolation", ()), list | tuple)
    )


def _always(step: Any) -> bool:
    return True


#: Steps of other libraries, by (module, class name), that do what the torchvision step named
#: does, with the condition under which they do: they take that step's place in the split.
ACTS_AS: dict[tuple[str, str], tuple[str, Callable[[Any], bool]]] = {
    ("timm.data.transforms", "MaybeToTensor"): ("ToTensor", _always),
    ("timm.data.transforms", "MaybePILToTensor"): ("PILToTensor", _always),
    ("timm.data.transforms", "ResizeKeepRatio"): ("Resize", _fixed_scale),
    ("timm.data.transforms", "CenterCropOrPad"): ("CenterCrop", _always),
    ("timm.data.random_erasing", "RandomErasing"): ("RandomErasing", _always),
}


def _per_type(step: Any) -> bool:
    """A ``ToDtype`` given a dtype per input type (``{tv_tensors.Image: torch.float32,
    "others": None}``) converts what it is given by its type: a collated batch, or a cached
    tensor read back, is a plain tensor where the sample was a ``tv_tensors.Image``."""
    return isinstance(getattr(step, "dtype", None), dict)


#: torchvision steps that are not what their name says in the split under a condition: such
#: a step is then unknown (it and the steps before it are the head, its output cached)
_UNLESS: dict[str, Callable[[Any], bool]] = {"ToDtype": _per_type}


def _acts_as(step: Any) -> str | None:
    """The torchvision step ``step`` is or does the work of (:data:`ACTS_AS`), else None."""
    cls = type(step)
    if cls.__module__.startswith("torchvision.transforms"):
        unless = _UNLESS.get(cls.__name__)
        return None if unless is not None and unless(step) else cls.__name__
    known = ACTS_AS.get((cls.__module__, cls.__name__))
    return known[0] if known is not None and known[1](step) else None


def _acts_in(step: Any, names: frozenset[str]) -> bool:
    return _acts_as(step) in names


def _is_tail(step: Any) -> bool:
    return _acts_in(step, DETERMINISTIC_TAIL | RANDOM_TAIL)


def _deterministic(step: Any) -> bool:
    """Whether ``step`` is of :data:`DETERMINISTIC_HEAD` (a Compose: all its steps are)."""
    if _acts_in(step, frozenset({"Compose"})):
        return all(_deterministic(s) for s in step.transforms)
    return _acts_in(step, DETERMINISTIC_HEAD)


class _Chain:
    """Steps applied in order (a picklable stand-in for a partial Compose)."""

    def __init__(self, steps: list[Callable]) -> None:
        self.steps = steps

    def __call__(self, x: Any) -> Any:
        for step in self.steps:
            x = step(x)
        return x

    def __repr__(self) -> str:
        return f"_Chain({self.steps!r})"


def _in_place(step: Callable) -> Callable:
    """``step`` working in place where it can: a batch tail works on a collated batch (or a
    float copy of it) that nobody else holds, and ``Normalize(inplace=True)`` gives the same
    numbers without a second batch-sized allocation."""
    if getattr(step, "inplace", True) is False:
        step = copy.copy(step)
        step.inplace = True
    return step


def _chain(steps: list[Callable]) -> Callable | None:
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else _Chain(steps)


class SplitTransform:
    """A transform as ``head`` (cached in the augmented tier) and ``tail`` (run per fetch).

    Either part may be None. ``fingerprint`` names the head in cache keys, so jobs with different
    random transforms never share augmented copies. The tail is also split in two:
    ``sample_tail`` (run per sample) then ``batch_tail`` (its trailing :data:`BATCH_TAIL` steps,
    which may run once per collated batch instead); ``tensor_first`` says the sample tail starts
    with ``PILToTensor``, which a uint8 HWC tensor view can stand in for.
    """

    def __init__(self, head: list[Callable], tail: list[Callable]) -> None:
        self.head_steps = head
        self.tail_steps = tail
        self.head = _chain(head)
        self.tail = _chain(tail)
        cut = len(tail)
        while cut > 0 and _acts_in(tail[cut - 1], BATCH_TAIL):
            cut -= 1
        self.sample_tail = _chain(tail[:cut])
        batch = [_in_place(s) for s in tail[cut:]]
        #: the batch tail (its output tensors reused once nobody holds them), or None
        self.batch_tail = BatchTail(batch) if batch else None
        self.tensor_first = cut > 0 and _acts_in(tail[0], frozenset({"PILToTensor"}))
        #: the sample tail after its leading PILToTensor (when ``tensor_first``)
        self.after_tensor = _chain(tail[1:cut]) if self.tensor_first else None
        #: the whole tail after its leading PILToTensor (when ``tensor_first``)
        self.after_tensor_all = _chain(tail[1:]) if self.tensor_first else None
        #: the head's name in cache keys (``seneca.pipeline.fingerprint``)
        self.fingerprint = fingerprint(head)
        #: the head is made of deterministic steps only (:data:`DETERMINISTIC_HEAD`): its
        #: output is the same every time
        self.fixed_head = bool(head) and all(_deterministic(s) for s in head)

    def without_head(self) -> SplitTransform:
        """The tail alone (what is left once the head's output is the sample's decoded
        form)."""
        return SplitTransform([], self.tail_steps)

    def __call__(self, x: Any) -> Any:
        if self.head is not None:
            x = self.head(x)
        return self.tail(x) if self.tail is not None else x


class ColumnTransform:
    """A Hugging Face ``datasets`` transform (for ``set_transform`` / ``with_transform``) that
    runs ``transform`` on each image of ``column`` and puts the results in ``output``, the
    other columns as they come: ``{**others, output: [transform(image), ...]}``.

    SenecaLoader knows what it does, so it splits ``transform`` as it splits a folder dataset's
    (``split_transform``): the random head's output is cached as augmented copies, a
    deterministic head's as the decoded form; any other function given to ``set_transform``
    runs at every fetch, uncached.
    """

    def __init__(
        self, transform: Callable[[Any], Any], column: str = "image", output: str = "pixel_values"
    ) -> None:
        self.transform, self.column, self.output = transform, column, output

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        out = {name: values for name, values in batch.items() if name != self.column}
        out[self.output] = [self.transform(image) for image in batch[self.column]]
        return out

    def __repr__(self) -> str:
        return f"ColumnTransform({self.transform!r}, {self.column!r}, {self.output!r})"


def split_transform(transform: Callable | None) -> SplitTransform:
    """Split ``transform`` as described in the module docs."""
    if transform is None:
        return SplitTransform([], [])
    steps = getattr(transform, "transforms", None)
    if not isinstance(steps, list | tuple):
        if isinstance(transform, CacheBoundary):
            return SplitTransform([], [])
        if _is_tail(transform):
            return SplitTransform([], [transform])
        return SplitTransform([transform], [])
    steps = list(steps)
    marks = [i for i, s in enumerate(steps) if isinstance(s, CacheBoundary)]
    if marks:
        cut = marks[-1]
        head = [s for s in steps[:cut] if not isinstance(s, CacheBoundary)]
        return SplitTransform(head, steps[cut + 1 :])
    cut = len(steps)
    while cut > 0 and _is_tail(steps[cut - 1]):
        cut -= 1
    return SplitTransform(steps[:cut], steps[cut:])


def default_train_transform(size: int = 224) -> Callable[[Any], Any]:
    """The standard ImageNet training transform (what ``mdp profile`` times): random resized
    crop, horizontal flip, then uint8 -> float32 and normalisation (the uncached tail)."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
