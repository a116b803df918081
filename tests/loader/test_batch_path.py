"""The stages a batch goes through are stated once (seneca/loader/_batch_path.py), in the order
its docstring gives, and the loader runs exactly those; on a real redis-server."""

import re
from pathlib import Path

import pytest
import torch
from helpers import opaque
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

import seneca.loader._batch_path as batch_path
from seneca import SenecaLoader

DET = v2.Compose(
    [
        opaque.Resize((16, 16), antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5] * 3, [0.25] * 3),
    ]
)


def _documented() -> list[str]:
    """The stage names in the module docstring, in order (``N. **name**``)."""
    return re.findall(r"\*\*([a-z' -]+)\*\*", batch_path.__doc__ or "")


def _names(loader) -> list[str]:
    return [name for name, _ in loader._path.stages({}, object())]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"num_workers": 0}, ["tail", "track", "budget tick", "stats"]),
        (
            {"num_workers": 1, "split": (0, 0, 1)},
            [
                "worker error",
                "merge",
                "tail",
                "release",
                "ahead",
                "lost worker",
                "track",
                "budget tick",
                "stats",
            ],
        ),
        ({"num_workers": 0, "shuffle": False}, ["tail", "budget tick", "stats"]),
        (
            {"num_workers": 0, "device": "cpu"},
            ["device copy", "device hand-over", "track", "budget tick", "stats"],
        ),
    ],
)
def test_the_loader_runs_the_stages_it_states(tiny_dataset, redis_url, options, expected):
    opts = {"batch_size": 4, "shuffle": True, "cache": redis_url, **options}
    loader = SenecaLoader(ImageFolder(str(tiny_dataset), transform=DET), **opts)
    try:
        names = _names(loader)
        assert names == expected
        documented = _documented()
        assert [documented.index(n) for n in names] == sorted(documented.index(n) for n in names)
        got = sum(len(y) for _, y in loader)
        assert got == 48  # the stages make every batch
    finally:
        loader.close()


def test_the_docstring_names_every_stage():
    documented = _documented()
    assert documented[:3] == ["decide", "slot", "fetch"]
    source = Path(batch_path.__file__).read_text()
    for name in re.findall(r'out\.append\(\("([a-z -]+)"', source):
        assert name in documented
