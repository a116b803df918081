"""Cached tensors read straight into the rows of the batch tensor, and collated without a copy."""

import pytest
import redis
import torch
from conftest import RedisProcess
from helpers.indexed import indexed
from torch.utils.data import default_collate
from torchvision.transforms import v2

from seneca import CacheBoundary, SenecaLoader
from seneca._cache.resp import Placed, execute
from seneca._torch_internals import view_base
from seneca.loader._rows import BatchRows, RowBatch, collate_rows
from seneca.pipeline import codec

CROP = v2.Compose([v2.RandomResizedCrop(12, antialias=True), v2.PILToTensor()])
CROP_NORM = v2.Compose(
    [
        v2.RandomResizedCrop(12, antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5] * 3, [0.25] * 3),
    ]
)


def test_execute_places_tensor_payloads(redis_proc):
    r = redis_proc.client
    tensors = [torch.randint(0, 255, (3, 4, 5), dtype=torch.uint8) for _ in range(3)]
    for k, t in enumerate(tensors):  # bytes(): redis-py 5.0 with hiredis packs no bytearray
        r.set(f"t{k}", bytes(codec.encode(t)))
    r.set("raw", bytes(codec.encode(b"file bytes")))
    r.set("odd", bytes(codec.encode(torch.zeros(2, 2, dtype=torch.uint8))))
    rows = BatchRows(6)

    def place(k, header, total):
        if k == 5:
            return None  # this element is read as usual
        layout = codec.tensor_layout(header, total)
        return None if layout is None else rows.place(k, *layout)

    keys = ["t0", "missing", "t1", "raw", "odd", "t2"]
    (values, count) = execute(r, [("MGET", *keys), ("DBSIZE",)], place=place)
    assert count == 5
    assert isinstance(values[0], Placed) and isinstance(values[2], Placed)
    assert values[0].size == len(codec.encode(tensors[0]))
    assert torch.equal(rows.rows[0], tensors[0]) and torch.equal(rows.rows[2], tensors[1])
    assert values[1] is None
    assert isinstance(values[3], bytearray) and bytes(codec.decode(values[3])) == b"file bytes"
    assert isinstance(values[4], bytearray)  # another shape: no row for it
    assert isinstance(values[5], bytearray) and torch.equal(codec.decode(values[5]), tensors[2])
    assert r.get("raw") is not None  # the connection is still in step


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_large_tensors_placed_whole_over_either_transport(transport, free_port):
    """Crop-sized tensors back to back (each spans several socket reads: part buffered, the
    rest received into its row) land whole, over a unix socket and over TCP; a value of the
    same size whose header differs (another shape) is not taken for the one before it."""
    server = RedisProcess(port=free_port)
    try:
        r = server.client if transport == "unix" else redis.Redis(port=free_port)
        tensors = [torch.randint(0, 255, (3, 224, 224), dtype=torch.uint8) for _ in range(6)]
        other = torch.randint(0, 255, (224, 3, 224), dtype=torch.uint8)  # same size
        for k, t in enumerate(tensors):
            r.set(f"t{k}", bytes(codec.encode(t)))
        r.set("other", bytes(codec.encode(other)))
        rows = BatchRows(7)
        rows.place(0, torch.uint8, (3, 224, 224))
        rows.rows.fill_(255)  # what a reused buffer may hold

        def place(k, header, total):
            layout = codec.tensor_layout(header, total)
            return None if layout is None else rows.place(k, *layout)

        keys = ["t0", "t1", "t2", "other", "t3", "t4", "t5"]
        (values, pong) = execute(r, [("MGET", *keys), ("PING",)], place=place)
        assert pong == b"PONG"
        placed = [k for k, v in enumerate(values) if isinstance(v, Placed)]
        assert placed == [0, 1, 2, 4, 5, 6]
        assert all(torch.equal(rows.rows[k], t) for k, t in zip(placed, tensors, strict=True))
        assert torch.equal(codec.decode(values[3]), other)
    finally:
        server.stop()


def test_collate_rows_returns_the_rows_tensor():
    rows = BatchRows(3)
    rows.place(0, torch.uint8, (2, 2))
    for k in range(3):
        rows.rows[k].fill_(k)
    samples = [(rows.rows[k], k) for k in range(3)]
    images, targets = collate_rows(samples)
    assert images is rows.rows and torch.equal(targets, torch.tensor([0, 1, 2]))
    for mixed in (
        samples[::-1],
        samples[:2],
        [samples[0], (torch.ones(2, 2, dtype=torch.uint8), 1)],
    ):
        got = collate_rows(mixed)
        want = default_collate(mixed)
        assert got[0] is not rows.rows and torch.equal(got[0], want[0])
    # a sample made elsewhere is moved into its row when it fits
    rows2 = BatchRows(2)
    rows2.place(0, torch.uint8, (2, 2))
    moved = rows2.settle(1, (torch.full((2, 2), 7, dtype=torch.uint8), "t"))
    assert moved[1] == "t" and view_base(moved[0]) is rows2.rows and int(rows2.rows[1, 0, 0]) == 7
    assert rows2.settle(1, (torch.zeros(3), "t"))[0].shape == (3,)  # does not fit: as it is


def _tail(transform, cached):
    """What the loader makes of a cached crop: the transform's steps after PILToTensor."""
    for step in transform.transforms[2:]:
        cached = step(cached)
    return cached


@pytest.mark.parametrize(("transform", "workers"), [(CROP, 0), (CROP_NORM, 0), (CROP_NORM, 2)])
def test_hits_are_read_into_the_batch(tiny_dataset, redis_proc, transform, workers):
    ds = indexed(tiny_dataset)
    ds.transform = transform
    opts = {"batch_size": 8, "shuffle": True, "cache": redis_proc.url, "split": (0, 0, 1)}
    a = SenecaLoader(ds, job="a", **opts)
    a.store.join("b")  # a second live job, so a admits augmented copies
    for _ in a:
        pass
    assert a.stats()["augmented"]["admitted"] == len(ds)
    c = SenecaLoader(ds, job="c", num_workers=workers, **opts)
    store = c.store
    seen = 0
    for x, y in c:
        assert x.is_contiguous() and x.shape[1:] == (3, 12, 12)
        for image, i in zip(x, y.tolist(), strict=True):
            cached = codec.decode(redis_proc.client.get(store.value_key("augmented", i)))
            assert torch.equal(image, _tail(transform, cached))
            seen += 1
    assert seen == len(ds) and c.stats()["augmented"]["hits"] == len(ds)


def _negate(target):
    return -target


@pytest.mark.parametrize("tail_step", [None, v2.ToPureTensor()])
def test_hits_with_a_target_transform_or_a_sample_tail(tiny_dataset, redis_proc, tail_step):
    """Hits that need more than their target (a target transform, a step after PILToTensor
    that runs per sample) take the general path, with the same rows."""
    ds = indexed(tiny_dataset)
    steps = [v2.RandomResizedCrop(12, antialias=True), v2.PILToTensor()]
    ds.transform = v2.Compose(steps + ([CacheBoundary(), tail_step] if tail_step else []))
    opts = {"batch_size": 8, "shuffle": True, "cache": redis_proc.url, "split": (0, 0, 1)}
    a = SenecaLoader(ds, job="a", **opts)
    a.store.join("b")
    for _ in a:
        pass
    ds.target_transform = _negate if tail_step is None else None
    c = SenecaLoader(ds, job="c", **opts)
    store = c.store
    for x, y in c:
        assert view_base(x) is None and x.shape[1:] == (3, 12, 12)
        for image, t in zip(x, y.tolist(), strict=True):
            i = -t if tail_step is None else t
            cached = codec.decode(redis_proc.client.get(store.value_key("augmented", i)))
            assert torch.equal(image, cached)
    assert c.stats()["augmented"]["hits"] == len(ds) and c.stats()["bytes_cache"] > 0


def test_a_batch_of_hits_and_misses(tiny_dataset, redis_proc):
    ds = indexed(tiny_dataset)
    ds.transform = CROP
    opts = {"batch_size": 48, "shuffle": True, "cache": redis_proc.url, "split": (0, 0, 1)}
    a = SenecaLoader(ds, job="a", cache_size="10KB", **opts)  # room for some crops only
    a.store.join("b")
    next(iter(a))
    c = SenecaLoader(ds, job="c", cache_size="10KB", **opts)
    x, y = next(iter(c))
    hits = c.stats()["augmented"]["hits"]
    assert 0 < hits < 48  # one batch, both kinds
    assert x.shape == (48, 3, 12, 12) and view_base(x) is None and x.is_contiguous()
    store = c.store
    same = 0
    for image, i in zip(x, y.tolist(), strict=True):
        value = redis_proc.client.get(store.value_key("augmented", i))
        same += value is not None and torch.equal(image, codec.decode(value))
    assert same >= hits


def test_a_row_batch_is_collated_to_its_rows_as_they_are():
    rows = torch.arange(3 * 2 * 4, dtype=torch.uint8).reshape(3, 2, 4)
    # copies, not views: only the mark makes collate_rows take the rows (it trusts the maker)
    batch = RowBatch(rows, zip([r.clone() for r in rows], [7, 8, 9], strict=True))
    assert [int(t) for _, t in batch] == [7, 8, 9]  # a list of samples, as any other
    images, targets = collate_rows(batch)
    assert images is rows
    assert targets.tolist() == [7, 8, 9]
