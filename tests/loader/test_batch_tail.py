"""The batch tail: dtype/normalise steps run once per collated batch, with the same numbers."""

import pytest
import torch
from helpers import opaque
from PIL import Image
from torch.utils.data import default_collate
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader
from seneca.pipeline import codec
from seneca.pipeline.transforms import default_train_transform, split_transform
from seneca_base.errors import ConfigError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
DET_V2 = v2.Compose(
    [
        opaque.Resize((20, 28), antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)


def test_tail_split_points():
    st = split_transform(default_train_transform(32))
    assert type(st.sample_tail).__name__ == "PILToTensor"
    assert [type(s).__name__ for s in st.batch_tail.steps] == ["ToDtype", "Normalize"]
    assert st.tensor_first and st.after_tensor is None
    # the batch tail normalises in place (its input is a batch only it holds); the user's own
    # step is left as it was
    assert st.batch_tail.steps[1].inplace and not st.tail_steps[-1].inplace
    v1 = split_transform(T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert type(v1.sample_tail).__name__ == "ToTensor" and not v1.tensor_first
    assert [type(s).__name__ for s in v1.batch_tail.steps] == ["Normalize"]
    none = split_transform(T.Compose([T.CenterCrop(8), T.PILToTensor()]))
    assert none.batch_tail is None and none.tensor_first


@pytest.mark.parametrize(
    "tv, convert",
    [(T, [T.ToTensor()]), (v2, [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])],
    ids=["v1", "v2"],
)
def test_random_erasing_after_the_conversions_runs_per_fetch_in_the_tail(tv, convert):
    """The head's crop is cached as uint8; the erasing is drawn again at every fetch (as
    DataLoader draws it), not frozen into a cached float tensor."""
    erase = tv.RandomErasing(p=1.0, value=0)
    split = split_transform(
        tv.Compose([tv.RandomCrop(16), *convert, tv.Normalize(MEAN, STD), erase])
    )
    assert [type(s).__name__ for s in split.head_steps] == ["RandomCrop"]
    names = [type(s).__name__ for s in convert] + ["Normalize", "RandomErasing"]
    assert [type(s).__name__ for s in split.tail_steps] == names
    assert split.batch_tail is None and not split.fixed_head
    crop = Image.new("RGB", (16, 16), (200, 100, 50))
    torch.manual_seed(0)
    erased = [split.tail(crop) for _ in range(8)]
    assert all((x == 0).any() for x in erased)  # each fetch erases a rectangle ...
    assert len({x.eq(0).sum().item() for x in erased}) > 1  # ... of its own


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_image_tensor_view_equals_pil_to_tensor(mode):
    img = Image.frombytes(mode, (7, 5), bytes(range(7 * 5 * len(mode))))
    value = codec.encode(img)
    view = codec.decode(value, image_tensor=True)
    want = v2.functional.pil_to_tensor(img)
    assert torch.equal(view, want) and view.stride() == want.stride()
    assert codec.decode(codec.encode(want), image_tensor=True).is_contiguous()  # TENSOR kind


def _expected(ds, indices):
    return default_collate([DET_V2(ds.loader(ds.samples[i][0])) for i in indices])


@pytest.mark.parametrize("workers", [0, 2])
def test_same_numbers_as_per_sample_on_misses_and_augmented_hits(tiny_dataset, redis_proc, workers):
    ds = ImageFolder(str(tiny_dataset), transform=DET_V2)
    opts = {"batch_size": 8, "cache": redis_proc.url, "split": (0, 0, 1), "num_workers": workers}
    a = SenecaLoader(ds, job="a", **opts)
    b = SenecaLoader(ds, job="b", batch_tail=False, **opts)
    next(iter(b))  # b is live, so a admits augmented values
    for k, (x, y) in enumerate(a):
        want = _expected(ds, range(8 * k, 8 * k + 8))
        assert x.dtype == torch.float32 and x.is_contiguous()
        assert torch.equal(x, want) and torch.equal(
            y, torch.tensor([ds.targets[i] for i in range(8 * k, 8 * k + 8)])
        )
    assert a.stats()["augmented"]["admitted"] == len(ds)
    for tail in (True, False):  # served from the augmented tier, batch tail on and off
        c = SenecaLoader(ds, job=f"c{tail}", batch_tail=tail, **opts)
        for k, (x, _) in enumerate(c):
            assert torch.equal(x, _expected(ds, range(8 * k, 8 * k + 8)))
        assert c.stats()["augmented"]["hits"] == len(ds)


def test_a_dtype_per_input_type_converts_the_samples_as_dataloader_does(tiny_dataset, redis_proc):
    """``ToDtype`` given a dtype per input type converts a ``tv_tensors.Image`` sample and
    would leave a plain tensor (a collated batch, a cached tensor read back) as it is: it
    stays in the head, its output cached, and the batches are DataLoader's."""
    from torch.utils.data import DataLoader
    from torchvision import tv_tensors

    per_type = {tv_tensors.Image: torch.float32, "others": None}
    tf = v2.Compose(
        [
            v2.ToImage(),
            opaque.Resize((20, 28), antialias=True),
            v2.ToDtype(per_type, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    split = split_transform(tf)
    assert type(split.head_steps[-1]).__name__ == "ToDtype"
    assert [type(s).__name__ for s in split.batch_tail.steps] == ["Normalize"]
    ds = ImageFolder(str(tiny_dataset), transform=tf)
    want = list(DataLoader(ds, batch_size=8))
    opts = {"batch_size": 8, "cache": redis_proc.url, "split": (0, 0, 1)}
    a, b = SenecaLoader(ds, job="a", **opts), SenecaLoader(ds, job="b", **opts)
    next(iter(b))  # b is live, so a admits augmented values
    for loader in (a, b):  # a makes every sample, b reads them from the cache
        for (x, y), (wx, wy) in zip(loader, want, strict=True):
            assert torch.equal(x, wx) and torch.equal(y, wy)
    assert a.stats()["augmented"]["admitted"] == len(ds) == b.stats()["augmented"]["hits"]


def test_a_collate_fn_gets_the_samples_types_made_or_cached(tiny_dataset, redis_proc):
    """A sample made by ``ToImage`` is a ``tv_tensors.Image``, as DataLoader gives it to the
    user's collate_fn, made or read back from the cache."""
    from torch.utils.data import DataLoader
    from torchvision import tv_tensors

    tf = v2.Compose([v2.ToImage(), opaque.Resize((20, 28), antialias=True)])
    ds = ImageFolder(str(tiny_dataset), transform=tf)
    types = {type(x) for batch in DataLoader(ds, batch_size=8, collate_fn=list) for x, _ in batch}
    assert types == {tv_tensors.Image}
    opts = {"batch_size": 8, "cache": redis_proc.url, "split": (0, 0, 1), "collate_fn": list}
    a, b = SenecaLoader(ds, job="a", **opts), SenecaLoader(ds, job="b", **opts)
    next(iter(b))  # b is live, so a admits augmented values
    for loader in (a, b):  # a makes every sample, b reads them from the cache
        assert {type(x) for batch in loader for x, _ in batch} == types
    assert a.stats()["augmented"]["admitted"] == len(ds) == b.stats()["augmented"]["hits"]


def test_batches_the_user_keeps_are_never_written_again(tiny_dataset, redis_url):
    """The tail's output tensors are reused only once dropped: a user who keeps every batch of
    an epoch (or a view of one) gets each one as it was made."""
    ds = ImageFolder(str(tiny_dataset), transform=DET_V2)
    loader = SenecaLoader(ds, batch_size=8, cache=redis_url, job="keeper")
    kept = list(loader)
    views = [x[1:3] for x, _ in loader]  # the batches dropped, views of them kept
    for k, ((x, _), view) in enumerate(zip(kept, views, strict=True)):
        want = _expected(ds, range(8 * k, 8 * k + 8))
        assert torch.equal(x, want) and torch.equal(view, want[1:3])
    assert len({x.data_ptr() for x, _ in kept} | {v.data_ptr() for v in views}) == 2 * len(kept)
    loader.reset_stats()
    for _ in loader:  # dropped each time: the same tensors come round again
        pass
    tail = loader.stats()["tail"]
    assert tail["reused"] >= len(kept) - 2 and tail["made"] + tail["reused"] == len(kept)


def test_custom_collate_gets_whole_samples(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=DET_V2)
    seen = []

    def collate(items):
        seen.extend(x.dtype for x, _ in items)
        return default_collate(items)

    loader = SenecaLoader(ds, batch_size=8, cache=redis_url, collate_fn=collate)
    x, _ = next(iter(loader))
    assert x.dtype == torch.float32 and set(seen) == {torch.float32}
    unbatched = SenecaLoader(ds, batch_size=None, cache=redis_url)
    x, _ = next(iter(unbatched))
    assert x.dtype == torch.float32 and x.shape == (3, 20, 28)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_tail": True, "collate_fn": default_collate}, "batch_tail=True needs"),
        ({"batch_tail": True, "batch_size": None}, "batch_tail=True needs"),
        ({"batch_tail": "yes"}, "batch_tail: expected"),
    ],
)
def test_batch_tail_option_errors(tiny_dataset, redis_url, kwargs, message):
    ds = ImageFolder(str(tiny_dataset), transform=DET_V2)
    with pytest.raises(ConfigError, match=message):
        SenecaLoader(ds, cache=redis_url, **kwargs)


def _open_as_is(path):
    """A dataset loader that keeps the file's own mode (torchvision's converts to RGB)."""
    with open(path, "rb") as f:
        img = Image.open(f)
        img.load()
    return img


@pytest.mark.parametrize("mode, cached", [("P", True), ("LA", True), ("I;16", True)])
def test_other_image_modes_give_pil_to_tensor_results(tmp_path, redis_proc, mode, cached):
    """Heads that output images of other modes: the same tensors as PILToTensor, cached as
    tensors where the codec can store them (uint16 included), never as converted images."""
    for k in range(8):
        d = tmp_path / "data" / f"c{k % 2}"
        d.mkdir(parents=True, exist_ok=True)
        if mode == "I;16":
            img = Image.frombytes(mode, (9, 7), bytes(range(k, k + 2 * 63)))
        else:
            img = Image.new("L", (9, 7), 10 * k).convert(mode)
        img.save(d / f"{k}.png")
    tf = v2.Compose([opaque.CenterCrop(5), v2.PILToTensor()])
    ds = ImageFolder(str(tmp_path / "data"), transform=tf, loader=_open_as_is)
    want = [
        v2.functional.pil_to_tensor(v2.functional.center_crop(_open_as_is(p), 5))
        for p, _ in ds.samples
    ]
    opts = {"batch_size": 4, "cache": redis_proc.url, "split": (0, 0, 1), "shuffle": False}
    a = SenecaLoader(ds, job="a", **opts)
    b = SenecaLoader(ds, job="b", **opts)
    next(iter(b))  # b is live: a admits augmented values
    for loader in (a, b):
        got = torch.cat([x for x, _ in loader])
        assert torch.equal(got, torch.stack(want))
    assert (a.stats()["augmented"]["admitted"] > 0) == cached
    assert (b.stats()["augmented"]["hits"] > 0) == cached
