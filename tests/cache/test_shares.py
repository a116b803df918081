"""One node, one budget: the datasets on a cache node share its memory under one rule, no write
is refused while a budget says there is room, and status shows the budgets in force."""

import logging

import pytest
import redis
from conftest import RedisProcess
from helpers import opaque
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader
from seneca._bench.synthetic import make_dataset
from seneca._cache.embedded import acquire_embedded
from seneca._cache.shares import Claim, NodeShares, allocate, waterfill
from seneca._cache.status import cache_status
from seneca._cli.cache import format_status
from seneca_base.tiers import TIERS

MB = 1_000_000


def test_waterfill_gives_no_one_more_than_it_asks_and_cuts_the_largest_first():
    assert waterfill(100, {"a": 10, "b": 80, "c": 80}) == {"a": 10, "b": 45, "c": 45}
    assert waterfill(100, {"a": 10, "b": 20}) == {"a": 10, "b": 20}
    assert waterfill(0, {"a": 10}) == {"a": 0}
    assert sum(waterfill(101, {"a": 90, "b": 90, "c": 90}).values()) <= 101


def test_idle_datasets_keep_what_they_hold_until_the_room_is_needed():
    idle = {
        "old": Claim(want=100, active=False, held=60, seen=1),
        "older": Claim(want=100, active=False, held=30, seen=0),
    }
    # the live dataset asks 150 and has filled what was left: the idle ones give, oldest first
    full = {"train": Claim(want=150, held=150, seen=9), **idle}
    assert allocate(150, full) == {"train": 150, "old": 0, "older": 0}
    assert allocate(200, full) == {"train": 150, "old": 50, "older": 0}
    assert allocate(300, full) == {"train": 150, "old": 60, "older": 30}
    # one that asks as much but holds little yet takes nothing from them: a sweep's next job
    # that needs less than it asks leaves the idle datasets warm
    young = {"train": Claim(want=150, held=10, seen=9), **idle}
    assert allocate(150, young) == {"train": 60, "old": 60, "older": 30}
    # what a dataset can use at most caps it: the rest goes to the others
    val = {"train": Claim(want=150), "val": Claim(want=150, need=30)}
    assert allocate(150, val) == {"train": 120, "val": 30}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Training images (96 of 320 x 240, 22 MB decoded) and validation images (48)."""
    root = tmp_path_factory.mktemp("shares")
    make_dataset(root / "train", 96, 3, size=(320, 240), progress=False, workers=2)
    make_dataset(root / "val", 48, 3, size=(320, 240), progress=False, workers=2, seed=1)
    return root


def test_a_train_and_a_validation_loader_share_one_node(photos, caplog):
    node = RedisProcess("--maxmemory", "30mb", "--maxmemory-policy", "noeviction")
    train_tf = T.Compose([opaque.CenterCropV1(200), T.RandomHorizontalFlip(), T.ToTensor()])
    val_tf = T.Compose([T.Resize(100), T.CenterCrop(96), T.ToTensor()])
    opts = dict(batch_size=8, cache=node.url, cache_size="30MB", split=(0, 1, 0))
    try:
        # each asks for the whole node: more than its tiers get beside the server's memory
        with pytest.warns(RuntimeWarning, match="does not fit the maxmemory"):
            train = SenecaLoader(ImageFolder(str(photos / "train"), train_tf), **opts)
            val = SenecaLoader(ImageFolder(str(photos / "val"), val_tf), shuffle=False, **opts)
        with caplog.at_level(logging.WARNING, logger="seneca"):
            val_reads = []
            for _ in range(3):
                for _ in train:
                    pass
                val.reset_stats()
                for _ in val:
                    pass
                val_reads.append(val.stats()["storage_reads"])
        errors = train.stats()["cache_errors"] + val.stats()["cache_errors"]
        assert errors == 0 and not any("refused" in m for m in caplog.messages)
        assert val_reads[1:] == [0, 0]  # the validation set fits its share from its first pass
        total = train.budgets.total
        budgets = sum(train.store.capacity.values()) + sum(val.store.capacity.values())
        assert 0 < budgets <= total
        # the validation set is small: the training set gets the rest of the node
        assert val.budgets.size < 3 * MB and train.budgets.size > total - 3 * MB
        status = cache_status(node.client, node.url)
        text = format_status(status)
        assert "share of the node" in text
        shares = {d.dataset: d.share for d in status.datasets}
        assert sum(shares.values()) <= status.tiers_total
        for loader in (train, val):
            [d] = [d for d in status.datasets if d.dataset == loader.store.keys.dataset]
            shown = {t.tier: t.budget for t in d.tiers if t.tier != "augmented"}
            assert shown == {t: loader.store.capacity[t] for t in TIERS if t != "augmented"}
        train.close()
        val.close()
    finally:
        node.stop()


def test_a_larger_cache_size_grows_the_embedded_cache(runtime_dir):
    url = acquire_embedded(10 * MB, room=2 * MB, key="a")
    r = redis.Redis.from_url(url)
    assert int(r.config_get("maxmemory")["maxmemory"]) == 12 * MB
    acquire_embedded(20 * MB, room=2 * MB, key="b")  # a second dataset asks for more
    assert int(r.config_get("maxmemory")["maxmemory"]) == 24 * MB  # the larger, two rooms
    acquire_embedded(5 * MB, room=2 * MB, key="a")  # less: nothing shrinks
    assert int(r.config_get("maxmemory")["maxmemory"]) == 24 * MB
    shares = NodeShares(r)
    shares.register("a", 10, 10 * MB)
    shares.register("b", 10, 20 * MB)
    total, got = shares.shares()
    assert sum(got.values()) <= total < 24 * MB
