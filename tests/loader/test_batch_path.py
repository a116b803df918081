"""The stages a batch goes through are stated once (seneca/loader/_batch_path.py), in the order
its docstring gives, and the loader runs exactly those; on a real redis-server."""

import importlib
import importlib.util
import os
import re
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import opaque
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

import seneca
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


def _stages_run(caplog) -> list[str]:
    """The stages the latest iteration ran, as its DEBUG line names them."""
    lines = [r.getMessage() for r in caplog.records if "batch stages: " in r.getMessage()]
    return lines[-1].split("batch stages: ", 1)[1].split(", ")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"num_workers": 0}, ["follow", "tail", "track", "budget tick", "stats"]),
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
        ({"num_workers": 0, "shuffle": False}, ["follow", "tail", "budget tick", "stats"]),
        (
            {"num_workers": 0, "device": "cpu"},
            ["follow", "device copy", "device hand-over", "track", "budget tick", "stats"],
        ),
    ],
)
def test_the_loader_runs_the_stages_it_states(tiny_dataset, redis_url, options, expected, caplog):
    opts = {"batch_size": 4, "shuffle": True, "cache": redis_url, **options}
    loader = SenecaLoader(ImageFolder(str(tiny_dataset), transform=DET), **opts)
    try:
        with caplog.at_level("DEBUG", logger="seneca"):
            got = sum(len(y) for _, y in loader)
        assert got == 48  # the stages make every batch
        names = _stages_run(caplog)
        assert names == expected
        documented = _documented()
        assert [documented.index(n) for n in names] == sorted(documented.index(n) for n in names)
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
    listed = re.findall(r"\*\*([a-z' -]+)\*\*", recipe.split("A batch starts at")[0])
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


ROOT = Path(seneca.__file__).resolve().parents[1]
#: a random crop, and a tail the loader runs once per batch
RANDOM_TAIL = v2.Compose(
    [
        v2.RandomResizedCrop(16),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5] * 3, [0.25] * 3),
    ]
)


def _script(name: str):
    """The module of ``scripts/<name>.py``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the repository path of a module of ours (else None), as scripts/batch_modules.py counts them
_ours = _script("batch_modules").ours


def _follow_a_batch() -> tuple[set[str], set[str]]:
    """The modules CONTRIBUTING's "Follow a batch" names: those of the stages, and every one
    (a bare name is in ``seneca/loader/``, a name ending in ``/`` a package's ``__init__.py``)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### Follow a batch", 1)[1].split("A batch crosses between", 1)[0]

    def named(part: str, pattern: str = r"`([\w/]+(?:\.py|/))`") -> set[str]:
        out = set()
        for name in re.findall(pattern, part):
            name = name if "/" in name.rstrip("/") else f"seneca/loader/{name}"
            out.add(name + "__init__.py" if name.endswith("/") else name)
        return out

    stages = section.split("A batch starts at", 1)[0]
    return named(stages, r"`([\w/]+\.py)`"), named(section)


def test_contributing_names_at_most_20_modules_that_own_a_batch_s_stages():
    stages, named = _follow_a_batch()
    assert len(stages) <= 20, sorted(stages)
    for name in named:
        assert (ROOT / name).is_file(), name


@pytest.mark.parametrize("workers", [0, 1])
def test_every_module_a_batch_runs_is_named_in_contributing(tiny_dataset, redis_url, workers):
    """Every call of the loader's epochs traced (``sys.setprofile`` in the training process and
    its threads, and in the worker from ``worker_init_fn``): each module of ours that runs is
    named in CONTRIBUTING's "Follow a batch", so that a reader who follows one from there meets
    no module the map leaves out."""
    _, named = _follow_a_batch()
    ran: dict[str, set[str]] = {"loader": set(), "worker": set()}
    files: dict[str, str | None] = {}
    parent = os.getpid()

    log = tiny_dataset.parent / f"ran-{workers}"

    def profile(frame, event, _arg):
        if event == "call":
            f = frame.f_code.co_filename
            name = files[f] if f in files else files.setdefault(f, _ours(f))
            role = "loader" if os.getpid() == parent else "worker"
            if name is not None and name not in ran[role]:
                ran[role].add(name)
                if role == "worker":  # written as it grows: a forked worker leaves by os._exit
                    log.write_text("\n".join(ran[role]))

    def traced(_worker: int) -> None:
        ran["worker"].clear()
        sys.setprofile(profile)

    loader = SenecaLoader(
        ImageFolder(str(tiny_dataset), transform=RANDOM_TAIL), batch_size=8, shuffle=True,
        cache=redis_url, split=(0.4, 0.3, 0.3), num_workers=workers,
        multiprocessing_context="fork" if workers else None,
        worker_init_fn=traced if workers else None, persistent_workers=False,
    )  # fmt: skip
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        for _ in range(2):
            assert sum(len(y) for _, y in loader) == 48
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        loader.close()
    if workers:
        ran["worker"] = set(log.read_text().split())
    made = ran["worker"] if workers else ran["loader"]
    for stage in ("_dataset", "_fetch", "_read", "_make", "_admit", "_samples"):
        assert f"seneca/loader/{stage}.py" in made  # the trace saw the batch being made
    assert ran["loader"] | ran["worker"] <= named, sorted((ran["loader"] | ran["worker"]) - named)
