"""Budgets that fit the node: a cache node whose ``maxmemory`` is the loader's ``cache_size``
keeps room for its own memory, the metadata and the batches in flight, gets hits from the
second epoch on and refuses no write, and every write it still refuses (data written beside
the cache) is a counted cache error, never a silent "full"."""

import logging

import pytest
from conftest import RedisProcess
from helpers import opaque
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader, defaults
from seneca._bench.synthetic import make_dataset

MAXMEMORY = 16_000_000


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """96 images of 320 x 240: decoded, 24 MB, 1.5 times the node's memory."""
    root = tmp_path_factory.mktemp("photos") / "data"
    make_dataset(root, 96, 3, size=(320, 240), progress=False, workers=2)
    return root


@pytest.fixture
def node():
    """A cache node of MAXMEMORY bytes that evicts nothing itself."""
    server = RedisProcess("--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction")
    yield server
    server.stop()


def test_a_node_as_big_as_the_cache_size_gets_hits(photos, node):
    own = int(node.client.info("memory")["used_memory_overhead"])
    ds = ImageFolder(str(photos), transform=CROP)
    with pytest.warns(RuntimeWarning, match="does not fit the maxmemory"):
        loader = SenecaLoader(ds, cache=node.url, cache_size=MAXMEMORY, **COMMON)
    assert loader.cache_size <= MAXMEMORY - own  # room for the server's own memory
    hits, refused, errors = _train(loader, node)
    assert hits[0] == 0 and hits[1] > 10 and hits[2] > 10
    assert refused == 0 and errors == 0


@pytest.fixture(scope="module")
def smalls(tmp_path_factory):
    """480 images of 160 x 120: decoded, 27.6 MB; the first samples the loader measures
    (``defaults.NEED_SAMPLES``) are a tenth of what a node of ``SMALL_NODE`` holds."""
    root = tmp_path_factory.mktemp("smalls") / "data"
    make_dataset(root, 480, 3, size=(160, 120), progress=False, workers=2)
    return root


SMALL_NODE = 24_000_000


@pytest.mark.parametrize("workers", [0, 2])
def test_a_node_as_big_as_the_cache_size_refuses_nothing_with_batches_in_flight(
    smalls, monkeypatch, workers
):
    """A batch's values sit in the server's client buffers while they are read or written:
    the node keeps room for a batch per worker (two without workers, whose next batch's reads
    go ahead) once the loader knows its samples' sizes, and values are written before they
    are admitted only while their tier has room for what the other workers may write at
    once. Looking at the share every batch, three epochs see no write refused."""
    monkeypatch.setattr(defaults, "AUTO_TICK", 0.0)
    node = RedisProcess("--maxmemory", str(SMALL_NODE), "--maxmemory-policy", "noeviction")
    try:
        ds = ImageFolder(str(smalls), transform=CROP)
        with pytest.warns(RuntimeWarning, match="does not fit the maxmemory"):
            loader = SenecaLoader(
                ds, cache=node.url, cache_size=SMALL_NODE, num_workers=workers, **COMMON
            )
        hits, refused, errors = _train(loader, node, samples=480)
        assert refused == 0 and errors == 0, (hits, refused, errors)
        assert hits[1] > 200 and hits[2] > 200, hits
        key = f"flight:{loader.store.keys.dataset}"
        assert int(node.client.hget("seneca:node", key)) >= 8 * 57_600 * (workers or 2)
    finally:
        node.stop()


def _foreign(node):
    """Data not Seneca's, a third of the node."""
    other = node.client.pipeline()
    for k in range(MAXMEMORY // 300_000):
        other.set(f"other{k}", b"x" * 100_000)
    other.execute()


def test_budgets_follow_data_written_beside_the_cache(photos, node, caplog):
    loader = SenecaLoader(ImageFolder(str(photos), transform=CROP), cache=node.url, **COMMON)
    before = loader.budgets.total
    _foreign(node)  # after the loader took its share: its next look sees less room
    with caplog.at_level(logging.WARNING, logger="seneca"):
        hits, refused, errors = _train(loader, node)
    assert loader.budgets.total < before - 2_000_000
    assert refused == 0 and errors == 0  # no write refused while a budget said there was room
    assert hits[1] > 5 and hits[2] > 5


def test_writes_the_node_refuses_are_counted_warned_and_shrink_the_budgets(
    photos, node, caplog, monkeypatch
):
    monkeypatch.setattr(defaults, "AUTO_TICK", 3600.0)  # no look at the share after the first
    loader = SenecaLoader(ImageFolder(str(photos), transform=CROP), cache=node.url, **COMMON)
    with caplog.at_level(logging.WARNING, logger="seneca"):
        next(iter(loader))  # the first look, then foreign data no look sees
        _foreign(node)
        hits, refused, errors = _train(loader, node)
    assert refused > 0 and errors >= refused  # never a silent "full"
    assert sum("refused to store" in m for m in caplog.messages) == 1
    assert hits[1] > 5 and hits[2] > 5


CROP = T.Compose([opaque.CenterCropV1(64), T.ToTensor()])  # decoded: whole images
COMMON = dict(batch_size=8, split=(0, 1, 0))


def _train(loader, node, epochs=3, samples=96):
    """Decoded hits per epoch, then the node's OOM refusals and the job's cache errors; the
    loader is closed."""
    hits = []
    for _ in range(epochs):
        before = loader.stats()["decoded"]["hits"]
        assert sum(len(y) for _, y in loader) == samples
        hits.append(loader.stats()["decoded"]["hits"] - before)
    refused = node.client.info("errorstats").get("errorstat_OOM", {}).get("count", 0)
    if refused:  # which commands, for the report
        stats = node.client.info("commandstats").items()
        print("refused:", {k: v["rejected_calls"] for k, v in stats if v.get("rejected_calls")})
    errors = loader.stats()["cache_errors"]
    loader.close()
    return hits, refused, errors
