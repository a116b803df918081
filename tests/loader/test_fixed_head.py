"""A transform whose head is deterministic (a validation transform: Resize, CenterCrop) is
cached as such: its output is the sample's decoded form, made once and reused every epoch by
every job, and the batches are bit-identical to DataLoader's."""

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import CacheBoundary, SenecaLoader
from seneca.pipeline.transforms import split_transform

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
V2 = v2.Compose(
    [
        v2.Resize(40),
        v2.CenterCrop(32),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)
V1 = T.Compose([T.Resize(36), T.CenterCrop(30), T.ToTensor(), T.Normalize(MEAN, STD)])
BOUNDARY = v2.Compose(
    [v2.Resize(40), v2.CenterCrop(32), v2.PILToTensor(), CacheBoundary(), v2.ToDtype(torch.float32)]
)


def test_which_heads_are_fixed():
    assert split_transform(V2).fixed_head and split_transform(V1).fixed_head
    assert split_transform(BOUNDARY).fixed_head
    assert split_transform(v2.Compose([v2.Compose([v2.Resize(8)]), v2.PILToTensor()])).fixed_head
    for random in (
        v2.Compose([v2.RandomResizedCrop(32), v2.PILToTensor()]),
        v2.Compose([v2.Resize(40), v2.RandomCrop(32), v2.PILToTensor()]),
        v2.Compose([v2.Lambda(lambda x: x), v2.PILToTensor()]),  # not on the list: unknown
        v2.Compose([v2.PILToTensor()]),  # no head at all
    ):
        assert not split_transform(random).fixed_head


@pytest.mark.parametrize("transform", [V2, V1, BOUNDARY], ids=["v2", "v1", "boundary"])
def test_a_validation_loader_is_bit_identical_and_reads_no_file_after_its_first_pass(
    tiny_dataset, redis_url, transform
):
    ds = ImageFolder(str(tiny_dataset), transform=transform)
    loader = SenecaLoader(ds, batch_size=8, cache=redis_url, cache_size="20MB")
    assert loader.store.keys.dataset.endswith(split_transform(transform).fingerprint)
    assert loader.planner.setting.tiers == ("decoded", "encoded")  # no head left to cache
    reference = list(DataLoader(ds, batch_size=8))
    for epoch in range(3):
        loader.reset_stats()
        got = list(loader)
        assert len(got) == len(reference)
        for (x, y), (rx, ry) in zip(got, reference, strict=True):
            assert torch.equal(x, rx) and torch.equal(y, ry)
        stats = loader.stats()
        if epoch:
            assert stats["storage_reads"] == 0 and stats["decodes"] == 0
            assert stats["decoded"]["hits"] == 48 and stats["transforms"] == 0
    assert loader.split["augmented"] == 0
    loader.close()


def test_jobs_share_the_fixed_heads_output_with_workers(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=V1)
    a, b = (
        SenecaLoader(
            ds, batch_size=8, shuffle=True, num_workers=2, cache=redis_url, cache_size="20MB"
        )
        for _ in range(2)
    )
    assert sum(len(y) for _, y in a) == 48
    b.reset_stats()
    xs = torch.cat([x for x, _ in b])
    assert xs.shape == (48, 3, 30, 30)
    assert b.stats()["storage_reads"] == 0 and b.stats()["decoded"]["hits"] == 48
    a.close()
    b.close()


def _crop_to_ten(worker_id):
    get_worker_info().dataset.transform = T.Compose([T.CenterCrop(10), T.ToTensor()])


def test_a_transform_changed_after_the_loader_was_made_is_never_served_old_values(
    tiny_dataset, redis_url
):
    ds = ImageFolder(str(tiny_dataset), transform=T.Compose([T.CenterCrop(20), T.ToTensor()]))
    warm = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB")
    assert {tuple(x.shape[-2:]) for x, _ in warm} == {(20, 20)}  # 20 x 20 crops cached
    changed = SenecaLoader(
        ds,
        batch_size=8,
        shuffle=True,
        num_workers=1,
        worker_init_fn=_crop_to_ten,
        cache=redis_url,
        cache_size="20MB",
    )
    for _ in range(2):  # (its worker says once that it reads around the cache)
        assert {tuple(x.shape[-2:]) for x, _ in changed} == {(10, 10)}
    assert changed.stats()["storage_reads"] == 96  # read around the old transform's values
    warm.close()
    changed.close()
