"""The loader process's share of a batch runs with one intra-op thread while workers run."""

import pytest
import torch
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader
from seneca.loader.intra_op import with_threads

TRANSFORM = v2.Compose(
    [
        v2.Resize((20, 28), antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
    ]
)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("workers", [0, 1])
def test_the_batch_tail_runs_with_one_thread_while_workers_run(
    tiny_dataset, redis_proc, two_threads, workers
):
    ds = ImageFolder(str(tiny_dataset), transform=TRANSFORM)
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_proc.url, split=(0, 0, 1), num_workers=workers
    )
    seen: list[int] = []
    tail = loader._batch_tail
    assert tail is not None  # Normalize runs once per batch, in the loader process

    def record(x):
        seen.append(torch.get_num_threads())
        return x

    tail.steps = [*tail.steps, record]
    batches = 0
    for x, _ in loader:
        assert torch.get_num_threads() == 2  # the user's setting while the batch is theirs
        assert x.dtype == torch.float32
        batches += 1
    assert batches == len(loader) and len(seen) == batches
    assert set(seen) == ({1} if workers else {2})  # without workers, as DataLoader: theirs


def test_the_setting_is_put_back_when_making_an_item_fails(two_threads):
    def items():
        assert torch.get_num_threads() == 1
        yield "first"
        assert torch.get_num_threads() == 1
        raise ValueError("a bad sample")

    it = with_threads(items(), 1)
    assert next(it) == "first" and torch.get_num_threads() == 2
    with pytest.raises(ValueError, match="a bad sample"):
        next(it)
    assert torch.get_num_threads() == 2
