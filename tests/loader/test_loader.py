import functools
import gc
import inspect
import itertools
import logging
import pickle
import shutil
import sys
import weakref

import psutil
import pytest
import torch
from helpers import warm
from torch.utils.data import DataLoader
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import CacheBoundary, SenecaLoader
from seneca_base.errors import ConfigError

DET = T.Compose([T.Resize((24, 32)), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
RANDOM = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])


def _batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def test_signature_matches_dataloader():
    ours = inspect.signature(SenecaLoader.__init__).parameters
    theirs = inspect.signature(DataLoader.__init__).parameters
    for name, p in theirs.items():
        assert name in ours, name
        assert ours[name].default == p.default and ours[name].kind == p.kind, name
    extra = [n for n in ours if n not in theirs]
    assert extra == [
        *("cache", "cache_size", "split", "plan", "spec"),
        *("job", "ods", "batch_tail", "strict", "device", "progress", "dataset_version"),
    ]
    assert all(ours[n].kind is inspect.Parameter.KEYWORD_ONLY for n in extra)


def test_every_dataloader_argument_is_passed_on():
    """SenecaLoader hands DataLoader each of its arguments after ``dataset`` by name."""
    import ast

    import seneca.loader.loader as module

    tree = ast.parse(inspect.getsource(module.SenecaLoader.__init__).lstrip())
    passed = next(
        {k.value: v.id for k, v in zip(n.value.keys, n.value.values, strict=True)}
        for n in ast.walk(tree)
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "args"
    )
    theirs = [n for n in inspect.signature(DataLoader.__init__).parameters if n != "self"]
    assert passed == {name: name for name in theirs[1:]}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": -1},
        {"shuffle": True, "sampler": [0, 1]},
        {"batch_size": None, "drop_last": True},
        {"timeout": -1},
        {"prefetch_factor": 2},
    ],
)
def test_dataloader_validation_errors_are_identical(tiny_dataset, redis_url, kwargs):
    ds = ImageFolder(str(tiny_dataset))
    with pytest.raises(Exception) as theirs:
        DataLoader(ds, **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        SenecaLoader(ds, cache=redis_url, **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_option_errors_name_the_option(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset))
    with pytest.raises(ConfigError, match="split"):
        SenecaLoader(ds, cache=redis_url, split=(0.5, 0.6, 0.0))
    with pytest.raises(ConfigError, match="cache_size"):
        SenecaLoader(ds, cache=redis_url, cache_size="lots")
    with pytest.raises(ConfigError, match="cache: URL scheme"):
        SenecaLoader(ds, cache="http://:pw@host:1")
    with pytest.raises(TypeError, match="cache_sise"):
        SenecaLoader(ds, cache=redis_url, cache_sise="1GB")
    with pytest.raises(ConfigError, match="ods=True needs a dataset .*list"):
        SenecaLoader(list(range(10)), cache=redis_url, ods=True, shuffle=True)


def test_batches_equal_dataloader_and_second_epoch_hits(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=DET)
    order = list(torch.randperm(len(ds), generator=torch.Generator().manual_seed(0)))
    expected = _batches(DataLoader(ds, batch_size=8, sampler=order))
    loader = SenecaLoader(ds, batch_size=8, sampler=order, cache=redis_url, cache_size="50MB")
    for epoch in range(3):
        got = _batches(loader)
        assert len(got) == len(expected)
        for (x, y), (ex, ey) in zip(got, expected, strict=True):
            assert x.dtype == ex.dtype and x.shape == ex.shape
            assert torch.equal(y, ey)
            assert torch.equal(x, ex), f"epoch {epoch}"
        s = loader.stats()
        if epoch == 0:
            assert s["decodes"] == len(ds) and s["storage_reads"] == len(ds)
        else:
            assert s["storage_reads"] == 0 and s["decodes"] == 0  # all served decoded
            assert s["decoded"]["hit_rate"] == 1.0 and s["bytes_cache"] > 0
        loader.reset_stats()


def test_random_transform_shapes_and_labels(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    loader = SenecaLoader(ds, batch_size=10, shuffle=True, cache=redis_url, split=(1, 0, 0))
    labels = []
    for x, y in loader:
        assert x.shape[1:] == (3, 24, 24) and x.dtype == torch.float32
        labels += y.tolist()
    assert sorted(labels) == sorted(t for _, t in ds.samples)
    for _ in loader:
        pass
    s = loader.stats()
    assert s["encoded"]["hits"] == len(ds) and s["decodes"] == 2 * len(ds)


def _sees_classes(classes, _worker_id):
    """A worker's dataset (what DataLoader handed it, pickled where spawned) answers for the
    user's: its ``classes`` are the user's."""
    assert torch.utils.data.get_worker_info().dataset.classes == classes


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.slow
def test_workers(tiny_dataset, redis_url, context):
    ds = ImageFolder(str(tiny_dataset), transform=DET)
    expected = _batches(DataLoader(ds, batch_size=6))
    # a spawned worker imports torch afresh, each epoch (4 s of CPU here): one worker for one
    # epoch shows the spawned path; two forked workers for two epochs show the rest
    spawn = context == "spawn"
    loader = SenecaLoader(
        ds, batch_size=6, num_workers=1 if spawn else 2, multiprocessing_context=context,
        cache=redis_url, worker_init_fn=functools.partial(_sees_classes, ds.classes),
    )  # fmt: skip
    epochs = 1 if spawn else 2
    for _ in range(epochs):
        got = _batches(loader)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(got, expected, strict=True))
    s = loader.stats()
    assert s["samples"] == epochs * len(ds)  # counted across worker processes
    assert s["decoded"]["hits"] + s["encoded"]["hits"] == (epochs - 1) * len(ds)


SCRIPT = """
import sys

from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader


class Halve:  # a step of the script's own: __main__ here, __mp_main__ in a spawned worker
    def __call__(self, x):
        return x // 2


def made(root):
    steps = [v2.RandomResizedCrop(16), v2.PILToTensor(), Halve()]
    return ImageFolder(root, transform=v2.Compose(steps))


if __name__ == "__main__":
    url, root = sys.argv[1:]
    common = dict(batch_size=4, shuffle=True, cache=url, split=(0.0, 0.5, 0.5))
    other = SenecaLoader(made(root), **common)
    mine = SenecaLoader(
        made(root), num_workers=1, multiprocessing_context="spawn", persistent_workers=True,
        **common,
    )
    for _ in range(2):
        for _ in zip(other, mine, strict=True):  # the other job live before mine's worker
            pass
    print(mine.stats()["augmented"]["admitted"])
    mine.close()
    other.close()
"""


@pytest.mark.slow
def test_a_scripts_own_steps_are_named_alike_in_its_spawned_workers(
    tiny_dataset, redis_url, tmp_path
):
    """A spawned worker runs the script as ``__mp_main__``; the transform it names again there
    is the one its job named in the script, so its crops are cached (two live jobs)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = warm.run(
        [sys.executable, str(script), redis_url, str(tiny_dataset)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "transform changed" not in out.stderr
    assert int(out.stdout.split()[-1]) > 0  # its crops offered under the transform's name


def test_loader_and_dataset_pickle(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    loader = SenecaLoader(ds, batch_size=4, cache=redis_url)
    next(iter(loader))  # a live client must not leak into the pickle
    copy = pickle.loads(pickle.dumps(loader))
    x, _ = next(iter(copy))
    assert x.shape == (4, 3, 24, 24)


def test_unreachable_cache_warns_once_and_trains(tiny_dataset, free_port, caplog):
    ds = ImageFolder(str(tiny_dataset), transform=DET)
    url = f"redis://:hunter2@127.0.0.1:{free_port}"
    with caplog.at_level(logging.WARNING, logger="seneca"):
        loader = SenecaLoader(ds, batch_size=8, cache=url)
        got = _batches(loader)
    relevant = [m for m in caplog.messages if "unreachable" in m or "failed" in m]
    assert len(relevant) == 1
    assert f"127.0.0.1:{free_port}" in relevant[0]
    assert "hunter2" not in relevant[0]
    assert len(got) == 6 and loader.stats()["storage_reads"] == len(ds)


def test_cache_boundary_keeps_cached_values_compact(tiny_dataset, redis_proc):
    tf = T.Compose(
        [
            T.RandomResizedCrop(24),
            T.PILToTensor(),
            CacheBoundary(),
            T.ConvertImageDtype(torch.float32),
        ]
    )
    ds = ImageFolder(str(tiny_dataset), transform=tf)
    a = SenecaLoader(ds, batch_size=8, cache=redis_proc.url, job="a", split=(0, 0, 1))
    b = SenecaLoader(ds, batch_size=8, cache=redis_proc.url, job="b", split=(0, 0, 1))
    next(iter(b))  # b is live
    for x, _ in a:
        assert x.dtype == torch.float32
    assert a.stats()["augmented"]["admitted"] > 0
    r = redis_proc.client
    sizes = [r.strlen(a.store.value_key("augmented", i)) for i in range(48)]
    sizes = [s for s in sizes if s]
    assert sizes and max(sizes) < 24 * 24 * 3 + 64  # uint8, not float32
    xs = [x for x, _ in b]
    assert all(x.dtype == torch.float32 for x in xs)
    assert b.stats()["augmented"]["hits"] > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_file_raises_what_dataloader_raises_and_names_it(
    tmp_path, tiny_dataset, redis_url, workers
):
    """A file that is not an image, and one deleted after the dataset was made: the loop
    raises the exception type DataLoader's raises (code that catches PIL's error or
    ``FileNotFoundError`` around its loop goes on catching it), naming the file."""
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    files = sorted((root / "class_000").iterdir())
    bad, gone = files[0], files[1]
    bad.write_bytes(b"this is not a jpeg")
    ds = ImageFolder(str(root), transform=DET)
    gone.unlink()
    for path in (bad, gone):
        if path == gone:  # the bad file alone first, then the missing one alone
            bad.write_bytes((tiny_dataset / "class_000" / bad.name).read_bytes())
        with pytest.raises(Exception) as want:  # (its workers raise the same type again)
            list(DataLoader(ds, batch_size=4))
        with pytest.raises(want.type) as got:
            list(SenecaLoader(ds, batch_size=4, num_workers=workers, cache=redis_url))
        assert isinstance(got.value, OSError), got.value  # as PIL's and open's errors are
        shown = str(got.value) + "".join(getattr(got.value, "__notes__", []))
        assert path.name in shown, shown


def test_a_workers_error_stops_the_workers_even_if_the_script_keeps_it(
    tmp_path, tiny_dataset, redis_url
):
    """A worker's error ends the iteration (as the end of an epoch does): the workers are told
    to stop before the loop gets the error, so none is left running however long the script
    keeps the error. (DataLoader's workers stop once nothing holds its error; if the script
    keeps it, Python's garbage collector takes the iterator later, and each worker is then
    terminated after 5 s.)"""
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    sorted((root / "class_000").iterdir())[0].write_bytes(b"this is not a jpeg")
    ds = ImageFolder(str(root), transform=DET)
    me = psutil.Process()
    before = {p.pid for p in me.children()}

    def training_loop() -> BaseException | None:
        try:
            for _ in SenecaLoader(ds, batch_size=4, num_workers=2, cache=redis_url):
                pass
        except OSError as err:
            return err  # kept, with its traceback (the frames, the iterator)
        return None

    gc.disable()  # the workers stop without the collector's help
    try:
        kept = training_loop()
        left = [p.pid for p in me.children() if p.pid not in before]
    finally:
        gc.enable()
    assert type(kept).__name__ == "UnidentifiedImageError", kept
    assert left == [], f"workers still running after their iteration's error: {left}"


def test_a_loader_the_script_drops_stops_its_persistent_workers_at_once(tiny_dataset, redis_url):
    """A loader with persistent workers, dropped after an epoch and a half (a sweep's trial
    ending, say), is freed at once, its workers stopped, as DataLoader's: nothing in it is
    left in a reference cycle for the garbage collector (an error reply read from the cache,
    as its first call gets, kept the frames that made the loader)."""
    me = psutil.Process()
    before = {p.pid for p in me.children()}

    def trial() -> weakref.ref:
        loader = SenecaLoader(
            ImageFolder(str(tiny_dataset), transform=DET),
            batch_size=4, shuffle=True, num_workers=2, persistent_workers=True, cache=redis_url,
        )  # fmt: skip
        for _ in loader:
            pass
        next(iter(loader))
        return weakref.ref(loader)

    gc.disable()
    try:
        loader = trial()
        left = [p.pid for p in me.children() if p.pid not in before]
    finally:
        gc.enable()
    assert loader() is None, "the loader outlived the script's last reference to it"
    assert left == [], f"workers still running after their loader was dropped: {left}"


def test_plan_option_uses_the_planned_split_and_cache_size(tiny_dataset, redis_proc, tmp_path):
    from seneca._cli.mdp import main

    redis_url = redis_proc.url
    redis_proc.client.config_set("maxmemory", 100_000_000)
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    plan_file = tmp_path / "plan.json"
    assert main(["plan", "inhouse-x2", "--model", "paper", "--out", str(plan_file)]) == 0
    with pytest.warns(RuntimeWarning, match="does not fit the maxmemory"):
        loader = SenecaLoader(ds, cache=redis_url, plan=plan_file)  # planned for 64 GB
    assert loader.split == {"encoded": 1.0, "decoded": 0.0, "augmented": 0.0}
    assert 90_000_000 < loader.cache_size < 100_000_000  # what fits the node
    planned = {"split": {"encoded": 20, "decoded": 30, "augmented": 50}}
    loader = SenecaLoader(ds, cache=redis_url, plan=planned, cache_size="10MB")
    assert loader.split == {"encoded": 0.2, "decoded": 0.3, "augmented": 0.5}
    assert loader.store.capacity == {
        "encoded": 2_000_000,
        "decoded": 3_000_000,
        "augmented": 5_000_000,
    }
    assert len(_batches(loader)) == len(loader)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("missing.json", "cannot read"),
        ("{not json", "not a JSON plan"),
        ('{"throughput": 1}', "expected an object with a 'split'"),
        ('{"split": {"encoded": 50, "decoded": 50}}', "split must have exactly"),
        ('{"split": {"encoded": 50, "decoded": 40, "augmented": 0}}', "sum to 100"),
        ('{"split": {"encoded": 0.5, "decoded": 0.5, "augmented": 0}}', "whole percent"),
        (
            '{"split": {"encoded": 100, "decoded": 0, "augmented": 0}, "cache_bytes": -1}',
            "cache_bytes",
        ),
    ],
)
def test_bad_plans_name_the_file(tiny_dataset, redis_url, tmp_path, plan, message):
    ds = ImageFolder(str(tiny_dataset))
    path = tmp_path / "plan.json"
    if plan != "missing.json":
        path.write_text(plan)
    with pytest.raises(ConfigError, match=message) as err:
        SenecaLoader(ds, cache=redis_url, plan=path)
    assert str(path) in str(err.value)
    with pytest.raises(ConfigError, match="plan= or split="):
        SenecaLoader(ds, cache=redis_url, plan=path, split=(1, 0, 0))


def _log_to_stderr(worker_id):
    """The seneca logger of this process writes to stderr (a forked worker's copy of pytest's
    log capture would keep its records)."""
    logger = logging.getLogger("seneca")
    if not any(getattr(h, "_to_stderr", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._to_stderr = True
        logger.addHandler(handler)


def test_a_cache_lost_mid_run_is_reported_once_per_job(tiny_dataset, capfd):
    """Workers and epochs share one warning (logged): the first process of the job to find the cache
    gone says so, the others read from storage silently."""
    from conftest import RedisProcess

    server = RedisProcess()
    ds = ImageFolder(str(tiny_dataset), transform=DET)
    opts = dict(batch_size=8, num_workers=2, worker_init_fn=_log_to_stderr)
    loader = SenecaLoader(ds, cache=server.url, **opts)
    server.stop()
    _log_to_stderr(0)
    try:
        for _ in range(2):
            assert len(_batches(loader)) == 6
    finally:
        logger = logging.getLogger("seneca")
        logger.handlers = [h for h in logger.handlers if not getattr(h, "_to_stderr", False)]
    assert capfd.readouterr().err.count("failed (") == 1
    assert loader.stats()["storage_reads"] == 2 * len(ds)
    assert loader.stats()["cache_errors"] >= 1  # the job's processes back off as one


def test_each_epoch_ends_with_a_summary_line_at_info(tiny_dataset, redis_url, caplog):
    loader = SenecaLoader(
        ImageFolder(str(tiny_dataset), transform=DET),
        batch_size=8,
        shuffle=True,
        num_workers=1,
        cache=redis_url,
        cache_size="20MB",
        job="summary",
    )
    with caplog.at_level(logging.INFO, logger="seneca"):
        list(loader)
        list(loader)
    lines = [r.getMessage() for r in caplog.records if "epoch" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("job summary epoch 0: 48 samples")
    assert "48 storage reads" in lines[0] and "0 storage reads" in lines[1]
    assert "(100%)" in lines[1]  # the second epoch read from the cache


@pytest.mark.parametrize("ods", [True, False])
def test_the_summary_comes_with_the_last_batch_when_the_loop_stops_at_len(
    tiny_dataset, redis_url, caplog, ods
):
    """Lightning, ``zip`` and ``islice`` take ``len(loader)`` batches and ask for no more:
    the iteration never ends, but the epoch did, and its summary says so with all its
    samples."""
    loader = SenecaLoader(
        ImageFolder(str(tiny_dataset), transform=DET),
        batch_size=8,
        shuffle=ods,
        cache=redis_url,
        cache_size="20MB",
        job=f"at-len-{ods}",
    )
    assert loader.ods == ods
    with caplog.at_level(logging.INFO, logger="seneca"):
        for epoch in range(2):
            assert len(list(itertools.islice(loader, len(loader)))) == 6
            lines = [m for m in caplog.messages if "storage reads" in m]
            assert len(lines) == epoch + 1, lines
            assert lines[-1].startswith(f"job at-len-{ods} epoch {epoch}: 48 samples"), lines
    assert loader.stats()["samples"] == 96


def test_progress_logs_lines_while_an_epoch_runs(tiny_dataset, redis_url, caplog):
    import time

    loader = SenecaLoader(
        ImageFolder(str(tiny_dataset), transform=DET), batch_size=8, cache=redis_url, progress=0.05
    )
    with caplog.at_level(logging.INFO, logger="seneca"):
        for _ in loader:
            time.sleep(0.03)
    lines = [m for m in caplog.messages if "samples/s" in m and "hit rate" in m]
    assert lines and all(m.startswith(f"job {loader.job} epoch 0:") for m in lines)
    with caplog.at_level(logging.INFO, logger="seneca"):
        for _ in loader:  # in the loader's own order, an epoch per iteration too
            pass
    assert any(m.startswith(f"job {loader.job} epoch 1: 48 samples") for m in caplog.messages)
    with pytest.raises(ConfigError, match="progress"):
        SenecaLoader(ImageFolder(str(tiny_dataset), transform=DET), progress="often")
