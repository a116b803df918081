"""A worker makes its batch's misses a few at a time and, while the cache is short of room,
swaps those still to make for copies another job cached after the batch was decided: the loop
gets every sample once in the epoch, and state_dict counts the samples it was served; on a
real redis-server."""

import collections
import threading
import time

import pytest
import torch
from helpers.engine import members
from helpers.indexed import indexed
from torchvision.transforms import v2

from seneca import SenecaLoader
from seneca.pipeline import codec
from seneca.pipeline.transforms import default_train_transform

_SAMPLE_S = 0.05


class _Slow(torch.nn.Module):
    """A transform step that takes a while per sample."""

    def forward(self, x):
        time.sleep(_SAMPLE_S)
        return x


#: a crop of a 16 x 16 image, as another job caches it
_CROP = codec.encode(torch.zeros((3, 16, 16), dtype=torch.uint8))


def _loader(root, redis_url, crops=36):
    """Job "a", its cache room for ``crops`` crops: short of room for a batch of 16 per live
    job once a's first 8 are offered (swaps are made only then)."""
    ds = indexed(root)
    ds.transform = v2.Compose([_Slow(), *default_train_transform(16).transforms])

    def made(size):
        return SenecaLoader(
            ds, batch_size=16, shuffle=True, num_workers=1, cache=redis_url, cache_size=size,
            split=(0, 0, 1), job="a",
        )  # fmt: skip

    probe = made(1 << 20)
    per_crop = probe.store.charge(len(_CROP))
    probe.close()
    return made(crops * per_crop)


def _crops_once_decided(store):
    """Another live job of the view ("b") caches a crop of every sample, once job "a" has had
    its first batch decided (all misses: nothing was cached)."""
    store.join("b")
    store.start_epoch("b", 0)
    client = store.client
    crop = _CROP

    def cache():
        deadline = time.monotonic() + 30
        while not int(client.hget(store.keys.meta + "used", "served") or 0):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        items = [(i, "augmented", store.charge(len(crop)), crop) for i in range(48)]
        store.admit("b", items)

    thread = threading.Thread(target=cache, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("cache", "crops", "swapped"), [("server", 36, 8), ("server", 400, 0), ("cluster", 36, 8)]
)
def test_misses_still_to_make_are_served_as_copies_cached_meanwhile(
    tiny_dataset, request, cache, crops, swapped
):
    """Short of room, the first batch's 8 misses past the first 8 are served as b's crops;
    with room for a batch per job, they are made (a swap would only move them later). (On a
    cluster the swap runs on the dataset's node, the swapped copies are read from theirs.)"""
    url = request.getfixturevalue("redis_proc" if cache == "server" else "redis_cluster").url
    loader = _loader(tiny_dataset, url, crops)
    thread = _crops_once_decided(loader.store)
    it = iter(loader)
    _, first = next(it)
    thread.join(10)
    assert loader.stats()["swapped"] == swapped
    assert members(loader.state_dict()["consumed"]) == set(first.tolist())
    seen = collections.Counter(first.tolist())
    seen.update(i for _, y in it for i in y.tolist())
    assert seen == collections.Counter(range(48))  # the swapped misses came later, once each
    loader.close()


def test_an_epoch_resumed_after_a_swapped_batch_serves_the_rest_once(tiny_dataset, redis_url):
    loader = _loader(tiny_dataset, redis_url)
    thread = _crops_once_decided(loader.store)
    it = iter(loader)
    _, first = next(it)
    thread.join(10)
    assert loader.stats()["swapped"] == 8
    state = loader.state_dict()
    del it
    loader.close()
    resumed = _loader(tiny_dataset, redis_url)
    resumed.load_state_dict(state)
    rest = collections.Counter(i for _, y in resumed for i in y.tolist())
    assert rest == collections.Counter(set(range(48)) - set(first.tolist()))
    resumed.close()
