"""The stages a batch goes through are stated once (seneca/loader/_batch_path.py), in the order
its docstring gives, and the loader runs exactly those; on a real redis-server."""

import importlib
import re
import sys
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
    assert documented[: len(batch_path.WORKER_STAGES)] == [n for n, _ in batch_path.WORKER_STAGES]
    source = Path(batch_path.__file__).read_text()
    for name in re.findall(r'out\.append\(\("([a-z -]+)"', source):
        assert name in documented


def test_contributing_names_the_stages_the_docstring_names_in_its_order():
    text = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text()
    recipe = text.split("### Follow a batch", 1)[1].split("###", 1)[0]
    listed = re.findall(r"\*\*([a-z' -]+)\*\*", recipe.split("`seneca/loader/_batch_path.py`")[0])
    assert listed == _documented()


def _started_by(where: str):
    """The code object of the function ``module:qualified.name``."""
    module, _, name = where.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj.__code__


def test_a_worker_runs_the_stages_it_states(tiny_dataset, redis_url, tmp_path):
    """A forked worker's calls traced (``sys.setprofile`` from ``worker_init_fn``): each batch
    starts the stages of ``WORKER_STAGES`` in their order (a stage may come again: a swap
    reads again), and a batch made in a slot starts every one."""
    stage_of = {_started_by(where): name for name, where in batch_path.WORKER_STAGES}
    log = tmp_path / "stages"

    def traced(_worker: int) -> None:
        out = log.open("a")

        def profile(frame, event, _arg):
            if event == "call" and frame.f_code in stage_of:
                out.write(stage_of[frame.f_code] + "\n")
                out.flush()

        sys.setprofile(profile)

    ds = ImageFolder(
        str(tiny_dataset), transform=v2.Compose([v2.RandomResizedCrop(16), v2.PILToTensor()])
    )
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_url, split=(0, 0, 1), num_workers=1,
        multiprocessing_context="fork", worker_init_fn=traced,
    )  # fmt: skip
    try:
        for _ in range(2):
            assert sum(len(y) for _, y in loader) == 48
    finally:
        loader.close()
    calls = log.read_text().split()
    batches: list[list[str]] = []
    for name in calls:
        if name == "decide":
            batches.append([])
        batches[-1].append(name)
    assert len(batches) >= 12  # every batch of both epochs (and a last ask that found none)
    order = [name for name, _ in batch_path.WORKER_STAGES]
    for started in batches:
        firsts = list(dict.fromkeys(started))
        assert firsts == [n for n in order if n in firsts], started
    assert any(list(dict.fromkeys(b)) == order for b in batches)
