"""The batch tail's output tensors: the same numbers as torchvision's steps, reused only when
nobody holds them."""

import pickle

import pytest
import torch
from torchvision import transforms as v1
from torchvision.transforms import v2

from seneca.pipeline.batch_tail import BatchTail, TensorPool

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _batch(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (4, 3, 9, 7), dtype=torch.uint8, generator=g)


@pytest.mark.parametrize(
    "steps",
    [
        [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD, inplace=True)],
        [v2.ToDtype(torch.float64, scale=True)],
        [v2.ToDtype(torch.float32, scale=False), v2.Normalize(MEAN, STD, inplace=True)],
        [v2.Normalize(MEAN, STD)],  # no conversion: the steps as given
        # made in blocks of images: torchvision's own Normalize (v1 or v2), one or more
        [v2.ToDtype(torch.float32, scale=True), v1.Normalize(MEAN, STD, inplace=True)],
        [v2.ToDtype(torch.float64, scale=True), v2.Normalize(MEAN, STD)],
        [v2.ToDtype(torch.float16, scale=True), v2.Normalize(MEAN, STD)],
        [
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5], [0.25]),
            v2.Normalize(MEAN, STD),
        ],
        # a step that is not a Normalize: the whole batch through the steps as given
        [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.ToDtype(torch.half)],
    ],
)
def test_the_same_numbers_as_the_steps(steps):
    tail = BatchTail(steps)
    for seed in range(3):
        x = _batch(seed) if type(steps[0]).__name__ == "ToDtype" else _batch(seed).float()
        want = x
        for step in steps:
            want = step(want.clone())
        got = tail(x)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_blocks_of_images_give_every_value_as_the_steps_do():
    """Every uint8 value in every channel, in images of a training crop's size (whose rows
    the vectorised loops cover whole) and of odd sizes, made a few images at a time: the same
    bits as torchvision's steps on the whole batch, and that path is the one taken."""
    steps = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD, inplace=True)]
    tail = BatchTail(steps)
    assert tail.in_blocks
    assert not BatchTail([*steps, v2.ToDtype(torch.half)]).in_blocks
    assert tail(torch.zeros((0, 3, 8, 8), dtype=torch.uint8)).shape == (0, 3, 8, 8)
    # one image a block; two a block, the last alone; the whole batch in one block
    for shape in [(2, 3, 224, 224), (7, 3, 200, 200), (3, 3, 17, 5)]:
        x = (torch.arange(torch.Size(shape).numel()) % 256).to(torch.uint8).reshape(shape)
        want = v2.Normalize(MEAN, STD)(v2.ToDtype(torch.float32, scale=True)(x))
        assert torch.equal(tail(x), want)


def _tail() -> BatchTail:
    return BatchTail([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD, inplace=True)])


def test_a_dropped_output_is_reused():
    tail = _tail()
    first = tail(_batch(0))
    at = first.data_ptr()
    del first
    second = tail(_batch(1))
    assert second.data_ptr() == at and (tail.pool.made, tail.pool.reused) == (1, 1)
    assert torch.equal(second, _tail()(_batch(1)))


def _weight_grad(conv: torch.nn.Conv2d, out: torch.Tensor) -> torch.Tensor:
    conv.zero_grad()
    out.sum().backward()
    return conv.weight.grad.clone()


def _inference_view(x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return x[0]


_CONV = torch.nn.Conv2d(3, 2, 3)

#: ways a user keeps a batch (or its memory) alive: (what to keep, what the kept thing reads
#: as, given the batch as it was made)
HOLDERS = {
    "the tensor": (lambda x: x, lambda k, want: torch.equal(k, want)),
    "a view": (lambda x: x[1:3], lambda k, want: torch.equal(k, want[1:3])),
    "a numpy array": (lambda x: x.numpy(), lambda k, want: torch.equal(torch.from_numpy(k), want)),
    "its storage": (
        lambda x: x.untyped_storage(),
        lambda k, want: torch.equal(torch.empty(0).set_(k).view(want.shape), want),
    ),
    "autograd": (  # a conv keeps its input for the weight's gradient
        lambda x: _CONV(x),
        lambda k, want: torch.equal(_weight_grad(_CONV, k), _weight_grad(_CONV, _CONV(want))),
    ),
    "an inference-mode view": (_inference_view, lambda k, want: torch.equal(k, want[0])),
    "a list": (lambda x: [x], lambda k, want: torch.equal(k[0], want)),
}


@pytest.mark.parametrize("how", list(HOLDERS))
def test_an_output_someone_holds_is_never_written(how):
    keep_of, reads_as = HOLDERS[how]
    tail = _tail()
    x = tail(_batch(0))
    want, at = x.clone(), x.data_ptr()
    keep = keep_of(x)
    del x
    later = [tail(_batch(seed)) for seed in range(1, 4)]
    assert all(t.data_ptr() != at for t in later)
    del later  # dropped: these are reused, the kept one is not
    assert tail(_batch(5)).data_ptr() != at and tail.pool.reused >= 1
    assert reads_as(keep, want)


def test_keep_zero_shapes_and_a_pickled_pool():
    pool = TensorPool(keep=0)  # keeps nothing: every tensor is new
    for _ in range(2):  # each dropped at once
        pool.empty((2, 3), torch.float32)
    assert (pool.made, pool.reused) == (2, 0)
    kept = TensorPool(keep=2)
    b = kept.empty((2, 3), torch.float32)
    copy = pickle.loads(pickle.dumps(kept))  # another process's copy holds none of these
    assert copy.empty((2, 3), torch.float32).data_ptr() != b.data_ptr() and copy.reused == 0
    at = b.data_ptr()
    del b
    kept.empty((3, 2), torch.float32)  # another shape: not the dropped one
    assert (kept.made, kept.reused) == (2, 0)
    assert kept.empty((2, 3), torch.float32).data_ptr() == at and kept.reused == 1
