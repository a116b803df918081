"""timm's transforms (``timm.data.create_transform``): the deterministic steps of its train and
eval pipelines are recognised by an explicit list (``seneca.pipeline.transforms.ACTS_AS``),
which these tests check against the installed timm."""

import inspect

import pytest
import timm.data
import timm.data.transforms
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader
from seneca.pipeline.transforms import ACTS_AS, split_transform

pytestmark = pytest.mark.ecosystem

#: the pipelines a timm user makes, for a model's default config and its common options
PIPELINES = {
    "eval": dict(is_training=False),
    "eval-squash": dict(is_training=False, crop_mode="squash"),
    "eval-border": dict(is_training=False, crop_mode="border"),
    "eval-crop-1": dict(is_training=False, crop_pct=1.0),
    "eval-prefetcher": dict(is_training=False, use_prefetcher=True),
    "train-no-aug": dict(is_training=True, no_aug=True),
    "train": dict(is_training=True),
    "train-randaugment-erasing": dict(
        is_training=True, auto_augment="rand-m9-mstd0.5", re_prob=0.25
    ),
    "train-prefetcher": dict(is_training=True, use_prefetcher=True),
}
EVAL = [name for name, kw in PIPELINES.items() if not kw["is_training"] or kw.get("no_aug")]

#: timm's own step classes that are random: cached as the head's augmented copies
RANDOM = {
    "RandomResizedCropAndInterpolation",
    "RandomCropOrPad",
    "RandomPad",
    "RandAugment",
    "AutoAugment",
    "AugMixAugment",
    "ResizeKeepRatio",  # only with random scale or aspect (ACTS_AS says when it is not)
}
#: timm's own step classes Seneca leaves unknown (a head with one is cached as augmented
#: copies): a conversion to numpy, timm's dtype-only ToTensor, a border trim
UNKNOWN = {"ToNumpy", "ToTensor", "TrimBorder"}


def _image(w=97, h=61, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(torch.randint(0, 256, (h, w, 3), generator=g).byte().numpy())


def test_every_step_class_of_timm_is_listed_as_known_random_or_unknown():
    """A new timm step class fails this test until it is put in one of the lists."""
    steps = {
        name
        for name, cls in vars(timm.data.transforms).items()
        if inspect.isclass(cls) and cls.__module__ == "timm.data.transforms"
    }
    known = {name for module, name in ACTS_AS if module == "timm.data.transforms"}
    assert steps - known - RANDOM - UNKNOWN == set()
    for module, name in ACTS_AS:  # and every listed class is in the installed timm
        assert inspect.isclass(getattr(__import__(module, fromlist=[name]), name)), (module, name)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_pipeline_splits_at_its_conversions(name):
    transform = timm.data.create_transform(32, **PIPELINES[name])
    split = split_transform(transform)
    tail = [type(s).__name__ for s in split.tail_steps]
    assert tail[0] in ("MaybeToTensor", "MaybePILToTensor"), tail
    assert split.fixed_head == (name in EVAL), [type(s).__name__ for s in split.head_steps]
    if "erasing" in name:  # drawn at every fetch, after the cached uint8 image
        assert tail == ["MaybeToTensor", "Normalize", "RandomErasing"]
        assert split.batch_tail is None
    elif "prefetcher" not in name:
        assert tail == ["MaybeToTensor", "Normalize"] and split.batch_tail is not None
    assert split.tensor_first == ("prefetcher" in name)


def test_the_listed_steps_do_what_the_torchvision_steps_do():
    img = _image()
    maybe, maybe_pil = timm.data.transforms.MaybeToTensor(), timm.data.transforms.MaybePILToTensor()
    assert torch.equal(maybe(img), T.ToTensor()(img))
    assert torch.equal(maybe_pil(img), T.PILToTensor()(img))
    x = T.PILToTensor()(img)
    assert maybe(x) is x and maybe_pil(x) is x  # a tensor passes unchanged
    crop = timm.data.transforms.CenterCropOrPad(40)
    assert crop(img).tobytes() == T.CenterCrop(40)(img).tobytes()
    fixed = timm.data.transforms.ResizeKeepRatio(48)
    assert split_transform(T.Compose([fixed, T.ToTensor()])).fixed_head
    assert fixed(img).tobytes() == fixed(img).tobytes()
    for random in (
        timm.data.transforms.ResizeKeepRatio(48, random_scale_prob=0.5),
        timm.data.transforms.ResizeKeepRatio(48, random_aspect_prob=0.5),
        timm.data.transforms.ResizeKeepRatio(48, interpolation="random"),
    ):
        assert not split_transform(T.Compose([random, T.ToTensor()])).fixed_head


@pytest.mark.parametrize("name", ["eval", "eval-border"])
def test_a_timm_eval_loader_caches_the_cropped_image_and_equals_dataloader(
    tiny_dataset, redis_url, name
):
    transform = timm.data.create_transform(32, **PIPELINES[name])
    ds = ImageFolder(str(tiny_dataset), transform=transform)
    loader = SenecaLoader(ds, batch_size=8, num_workers=1, cache=redis_url, cache_size="20MB")
    assert loader.planner.setting.tiers == ("decoded", "encoded")  # no random head to cache
    reference = list(DataLoader(ds, batch_size=8))
    for epoch in range(2):
        loader.reset_stats()
        got = list(loader)
        for (x, y), (rx, ry) in zip(got, reference, strict=True):
            assert torch.equal(x, rx) and torch.equal(y, ry)
        if epoch:
            stats = loader.stats()
            assert stats["storage_reads"] == 0 and stats["decoded"]["hits"] == 48, stats
            # each cached value is the 32 x 32 crop, not the 64 x 48 decoded image
            assert 32 * 32 * 3 <= stats["bytes_cache"] / 48 < 64 * 48 * 3 / 2, stats
    loader.close()
