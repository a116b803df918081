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


def _timm_folder(root, **kw):
    """timm's dataset of a folder, as its training script makes it (``create_dataset``)."""
    return timm.data.create_dataset("", root=str(root), **kw)


@pytest.mark.parametrize(("mode", "workers"), [("RGB", 0), ("RGB", 2), ("L", 0)])
def test_timms_own_dataset_of_a_folder_is_cached_and_equals_dataloader(
    tiny_dataset, redis_url, mode, workers
):
    """timm's ``ImageDataset`` (``create_dataset`` of a folder): its files are cached, its
    images converted to its ``input_img_mode`` as timm converts them, and every epoch is
    DataLoader's, bit for bit; the second is read from the cache."""
    steps = [T.Resize(32), T.CenterCrop(32), T.PILToTensor()]
    ds = _timm_folder(tiny_dataset, input_img_mode=mode, transform=T.Compose(steps))
    reference = list(DataLoader(ds, batch_size=8))
    loader = SenecaLoader(ds, batch_size=8, num_workers=workers, cache=redis_url)
    try:
        assert loader.not_cached is None
        for epoch in range(2):
            loader.reset_stats()
            got = list(loader)
            for (x, y), (rx, ry) in zip(got, reference, strict=True):
                assert x.shape[1] == len(mode) and torch.equal(x, rx) and torch.equal(y, ry)
            assert loader.stats()["storage_reads"] == (0 if epoch else 48)
    finally:
        loader.close()


class _OwnItems(timm.data.ImageDataset):
    def __getitem__(self, index):
        image, target = super().__getitem__(index)
        return image, target + 100


@pytest.mark.parametrize("kind", ["load_bytes", "no mode", "own __getitem__"])
def test_a_timm_dataset_it_cannot_cache_is_read_as_dataloader_reads_it(
    tiny_dataset, redis_url, kind
):
    """A timm dataset whose samples Seneca would not make as timm does (the file's bytes
    handed to the transform, the file as opened, a subclass's own samples) is read as
    DataLoader reads it, saying why."""
    pixels = T.Compose([T.Resize(16), T.CenterCrop(16), T.PILToTensor()])
    if kind == "load_bytes":
        ds = _timm_folder(tiny_dataset, load_bytes=True, transform=lambda b: torch.tensor(len(b)))
    elif kind == "no mode":
        ds = _timm_folder(tiny_dataset, input_img_mode=None, transform=pixels)
    else:
        ds = _OwnItems(str(tiny_dataset), transform=pixels)
    with pytest.warns(UserWarning, match="no cache"):
        loader = SenecaLoader(ds, batch_size=8, cache=redis_url)
    try:
        assert {"load_bytes": "load_bytes", "no mode": "input_img_mode"}.get(
            kind, "overrides __getitem__"
        ) in loader.not_cached
        for (x, y), (rx, ry) in zip(loader, DataLoader(ds, batch_size=8), strict=True):
            assert torch.equal(x, rx) and torch.equal(y, ry)
    finally:
        loader.close()


def test_a_file_timm_would_skip_is_named_in_the_error(tiny_dataset, tmp_path, redis_url):
    """Where timm's dataset skips a file it cannot open (a warning, and the next sample in its
    place), SenecaLoader raises what opening it raised, naming the file: no sample is lost
    unseen."""
    import shutil

    root = shutil.copytree(tiny_dataset, tmp_path / "data")
    broken = sorted(root.rglob("*.jpg"))[5]
    broken.write_bytes(b"not a jpeg")
    ds = _timm_folder(root, transform=T.PILToTensor())
    loader = SenecaLoader(ds, batch_size=8, cache=redis_url)
    try:
        with pytest.raises(Image.UnidentifiedImageError) as err:
            list(loader)
        assert str(broken) in "".join(err.value.__notes__)
    finally:
        loader.close()
