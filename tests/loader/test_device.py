"""``device=``: batches on the device, the batch tail run there, pinned buffers reused.

The CPU tests run everywhere; the CUDA tests skip without a GPU (run them on a GPU machine with
``pytest tests/loader/test_device.py``)."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import CacheBoundary, SenecaLoader
from seneca.loader._device import DeviceFeed, HostBuffers, resolve_device
from seneca.pipeline.transforms import split_transform
from seneca_base.errors import ConfigError

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def transform():
    """Deterministic, with a cached head and a batch tail (ToDtype, Normalize)."""
    return v2.Compose(
        [
            v2.Resize((24, 32)),
            v2.PILToTensor(),
            CacheBoundary(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


def reference(root):
    """DataLoader's batches of the same dataset, in order."""
    ds = ImageFolder(str(root), transform=transform())
    return list(DataLoader(ds, batch_size=8))


def loader(root, url, **kwargs):
    ds = ImageFolder(str(root), transform=transform())
    return SenecaLoader(ds, batch_size=8, cache=url, cache_size="20MB", **kwargs)


def test_device_names_are_checked_and_errors_name_the_option():
    assert resolve_device(None) is None
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    for bad, says in (
        ("gpu0", "device: expected 'cuda', 'cuda:N', 'cpu'"),
        ("meta", "feeds CUDA devices and the CPU"),
        (3.5, "device: expected"),
    ):
        with pytest.raises(ConfigError, match=says):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda")
    else:
        with pytest.raises(ConfigError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_a_bad_device_is_refused_when_the_loader_is_made(tiny_dataset, redis_url):
    with pytest.raises(ConfigError, match="device"):
        loader(tiny_dataset, redis_url, device="tpu")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.slow
def test_on_the_cpu_the_batches_are_dataloaders_with_the_tail_run_per_batch(
    tiny_dataset, redis_url, workers
):
    expected = reference(tiny_dataset)
    ours = loader(tiny_dataset, redis_url, num_workers=workers, device="cpu", ods=False)
    for _ in range(2):  # the second epoch reads the cached uint8 images
        got = list(ours)
        assert len(got) == len(expected)
        for (x, y), (ex, ey) in zip(got, expected, strict=True):
            assert x.device.type == "cpu" and x.dtype == torch.float32
            assert torch.allclose(x, ex, atol=1e-6) and torch.equal(y, ey)
    stats = ours.stats()
    assert stats["device"]["device"] == "cpu" and stats["device"]["batches"] == 2 * len(expected)
    assert stats["device"]["buffers_made"] == 0  # nothing is copied on the CPU
    assert sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded")) > 0
    ours.close()


def test_with_a_collate_fn_of_the_users_the_tail_runs_per_sample_and_batches_move(
    tiny_dataset, redis_url
):
    def collate(samples):
        return [torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])]

    expected = reference(tiny_dataset)
    ours = loader(tiny_dataset, redis_url, device="cpu", ods=False, collate_fn=collate)
    for (x, y), (ex, ey) in zip(ours, expected, strict=True):
        assert x.dtype == torch.float32 and torch.allclose(x, ex, atol=1e-6)
        assert torch.equal(y, ey)
    ours.close()


def test_a_dataset_seneca_does_not_cache_is_moved_as_it_is(redis_url):
    data = TensorDataset(torch.arange(12).float().view(6, 2), torch.arange(6))
    with pytest.warns(UserWarning, match="no cache"):
        ours = SenecaLoader(data, batch_size=4, cache=redis_url, device="cpu")
    got = list(ours)
    assert [y.tolist() for _, y in got] == [[0, 1, 2, 3], [4, 5]]
    assert ours.stats()["device"]["batches"] == 2


def test_host_buffers_are_taken_again_once_their_copy_is_done():
    buffers = HostBuffers(pin=False, keep=2, shapes=2)
    a = buffers.take((4, 3), torch.uint8)
    buffers.give_back(a, None)  # None: the copy out of it is done
    assert buffers.take((4, 3), torch.uint8) is a
    b = buffers.take((4, 3), torch.uint8)  # a is out: a new one
    assert b is not a and buffers.made == 2 and buffers.reused == 1
    buffers.give_back(a, None)
    buffers.give_back(b, None)
    c = buffers.take((4, 3), torch.int64)  # another dtype is another buffer
    assert c.dtype == torch.int64 and buffers.made == 3
    buffers.give_back(c, None)
    buffers.give_back(buffers.take((2, 3), torch.uint8), None)  # a third shape: the oldest goes
    assert buffers.take((4, 3), torch.uint8) is not a and buffers.made == 5


def test_a_feed_runs_the_tail_on_the_images_only_and_walks_any_batch_structure():
    tail = split_transform(transform()).batch_tail
    feed = DeviceFeed(torch.device("cpu"), tail)
    images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    out = feed.hand_over(feed.stage([images, torch.tensor([1, 2])]))
    assert out[0].dtype == torch.float32
    assert torch.allclose(out[0][:, 0], torch.full((2, 4, 4), (1 - MEAN[0]) / STD[0]))
    assert out[1].tolist() == [1, 2]
    # anything but a list of images first is moved as it is
    assert feed.hand_over(feed.stage({"x": images}))["x"] is images
    assert feed.stats()["batches"] == 2


@cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_on_cuda_batches_arrive_on_the_device_normalised_there(tiny_dataset, redis_url, workers):
    expected = reference(tiny_dataset)
    ours = loader(tiny_dataset, redis_url, num_workers=workers, device="cuda", ods=False)
    for _ in range(2):
        got = [(x.cpu(), y.cpu(), x.device, x.dtype) for x, y in ours]
        for (x, y, where, dtype), (ex, ey) in zip(got, expected, strict=True):
            assert where.type == "cuda" and dtype == torch.float32
            assert torch.allclose(x, ex, atol=1e-5) and torch.equal(y, ey)
    ours.close()


@cuda
def test_on_cuda_no_pinned_memory_is_allocated_per_batch_after_warm_up(tiny_dataset, redis_url):
    ours = loader(tiny_dataset, redis_url, num_workers=2, device="cuda", persistent_workers=True)
    for _ in ours:  # warm-up: an epoch of the loader's buffers
        pass
    made = ours.stats()["device"]["buffers_made"]
    host = _host_allocations()
    for _ in range(3):
        for x, _ in ours:
            x.sum()  # the loop uses the batch on its stream
    torch.cuda.synchronize()
    stats = ours.stats()["device"]
    assert stats["buffers_made"] == made  # every later batch reused a pinned buffer
    assert stats["buffers_reused"] >= 3 * 6
    print("pinned blocks handed out by torch:", host, "->", _host_allocations())
    if host is not None:
        assert _host_allocations() == host  # torch's pinned allocator was not asked either
    ours.close()


def _host_allocations():
    """Pinned blocks torch's host allocator has handed out so far (cached ones too), where
    this torch says."""
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return None
    got = stats()
    for key in ("active_requests.allocated", "num_host_alloc"):
        if key in got:
            return got[key]
    return None


@cuda
def test_on_cuda_the_loops_own_stream_waits_for_the_batch(tiny_dataset, redis_url):
    expected = reference(tiny_dataset)
    ours = loader(tiny_dataset, redis_url, num_workers=1, device="cuda", ods=False)
    side = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(side):
        for x, _ in ours:
            sums.append((x * 1).sum(dim=(1, 2, 3)))
    torch.cuda.synchronize()
    for got, (ex, _) in zip(sums, expected, strict=True):
        assert torch.allclose(got.cpu(), ex.sum(dim=(1, 2, 3)), rtol=1e-4, atol=1e-3)
    ours.close()
