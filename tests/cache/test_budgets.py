"""Budgets that fit the node: a cache node whose ``maxmemory`` is the loader's ``cache_size``
keeps room for its own memory and the metadata, gets hits from the second epoch on, and every
write it refuses is a counted cache error, never a silent "full"."""

import logging

import pytest
from conftest import RedisProcess
from helpers import opaque
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader, defaults
from seneca._bench.synthetic import make_dataset

MAXMEMORY = 8_000_000


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """96 images of 320 x 240: decoded, 24 MB, three times the node's memory."""
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
    assert errors == refused  # none, or each one counted


def _foreign(node):
    """Data not Seneca's, a third of the node."""
    other = node.client.pipeline()
    for k in range(27):
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


def _train(loader, node, epochs=3):
    """Decoded hits per epoch, then the node's OOM refusals and the job's cache errors; the
    loader is closed."""
    hits = []
    for _ in range(epochs):
        before = loader.stats()["decoded"]["hits"]
        assert sum(len(y) for _, y in loader) == 96
        hits.append(loader.stats()["decoded"]["hits"] - before)
    refused = node.client.info("errorstats").get("errorstat_OOM", {}).get("count", 0)
    errors = loader.stats()["cache_errors"]
    loader.close()
    return hits, refused, errors
