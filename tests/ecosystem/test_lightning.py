"""PyTorch Lightning, unmodified, with SenecaLoaders from ``train_dataloader()`` and
``val_dataloader()``: a script of its own (Lightning's DDP starts its ranks by running the
script again), on a real cache."""

import collections
import json
import subprocess
import sys
from pathlib import Path

import lightning
import pytest
from lightning_job import TRANSFORM, Classifier, digest
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

pytestmark = pytest.mark.ecosystem

SCRIPT = Path(__file__).with_name("lightning_job.py")


def fit(data, url, out, devices, ckpt=None):
    out.mkdir(exist_ok=True)
    args = [sys.executable, str(SCRIPT), str(data), url, str(out), str(devices)]
    done = subprocess.run(
        args + ([str(ckpt)] if ckpt else []), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


def everything(data):
    return {digest(x[0]) for x, _ in DataLoader(ImageFolder(str(data), transform=TRANSFORM))}


def trainer(root, **options) -> lightning.Trainer:
    """A quiet single-process CPU trainer writing under ``root``."""
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    return lightning.Trainer(
        accelerator="cpu", devices=1, default_root_dir=str(root), **quiet, **options
    )


@pytest.mark.slow
def test_ddp_with_lightnings_distributed_sampler(tiny_dataset, redis_url, tmp_path):
    """``strategy="ddp"`` on two CPU processes with ``use_distributed_sampler=True`` (the
    default): the training loader is left as it is (it shards each epoch already), each epoch
    gives each rank 24 samples and the two ranks every sample once, the second epoch reads
    none from storage; the validation loader Lightning rebuilds around its DistributedSampler
    reads every sample once across the ranks. Resumed from a checkpoint taken mid-epoch (rank
    0's loader state in it), each rank finishes its part of that epoch; from the last
    checkpoint (an epoch's end), a third epoch runs whole, from the cache."""
    samples = everything(tiny_dataset)
    assert len(samples) == 48

    def assert_whole(ranks, stage, epoch):
        shares = [r["seen"][stage][epoch] for r in ranks]
        assert [len(s) for s in shares] == [24, 24], (stage, epoch)
        together = collections.Counter(shares[0] + shares[1])
        assert set(together) == samples and max(together.values()) == 1, (stage, epoch)

    ranks = fit(tiny_dataset, redis_url, tmp_path / "ddp", 2)
    assert all(r["train_loader_kept"] for r in ranks)
    assert ranks[0]["job"] == ranks[1]["job"]
    for stage in ("train", "val"):
        for epoch in ("0", "1"):
            assert_whole(ranks, stage, epoch)
    for r in ranks:
        first, second = r["stats"]
        assert second["storage_reads"] == first["storage_reads"], r["stats"]
        assert second["decoded"]["hits"] - first["decoded"]["hits"] == 24

    # from the checkpoint taken 3 batches into epoch 1 (one rank's state in it), the rest of
    # that epoch: with the batches before it, every sample once
    mid = tmp_path / "ddp" / "checkpoints" / "mid-step=9.ckpt"
    rest = fit(tiny_dataset, redis_url, tmp_path / "mid", 2, ckpt=mid)
    assert [list(r["seen"]["train"]) for r in rest] == [["1"], ["1"]]
    before = [r["seen"]["train"]["1"][:12] for r in ranks]
    after = [r["seen"]["train"]["1"] for r in rest]
    together = collections.Counter(x for part in before + after for x in part)
    assert set(together) == samples and max(together.values()) == 1

    [last] = (tmp_path / "ddp" / "checkpoints").glob("epoch=1-*.ckpt")
    resumed = fit(tiny_dataset, redis_url, tmp_path / "resumed", 2, ckpt=last)
    for stage in ("train", "val"):
        assert all(list(r["seen"][stage]) == ["2"] for r in resumed)
        assert_whole(resumed, stage, "2")
    assert [r["stats"][0]["storage_reads"] for r in resumed] == [0, 0]


def test_fit_validate_test_and_predict_in_one_process(tiny_dataset, redis_url, tmp_path):
    """The script's module, in this process: each stage reads every sample once."""
    model = Classifier(str(tiny_dataset), redis_url)
    fitting = trainer(tmp_path, max_epochs=1)
    fitting.fit(model)
    fitting.validate(model)  # after fit: the module's epoch 1
    fitting.test(model)
    predictions = fitting.predict(model)
    samples = everything(tiny_dataset)
    runs = [("train", "0"), ("val", "0"), ("val", "1"), ("test", "1"), ("predict", "1")]
    for stage, epoch in runs:
        seen = model.seen[stage][epoch]
        assert len(seen) == 48 and set(seen) == samples, (stage, epoch)
    assert sum(len(p) for p in predictions) == 48


@pytest.mark.parametrize("name", [None, "named"])
def test_loaders_made_again_each_epoch_read_the_same_cache(tiny_dataset, redis_url, tmp_path, name):
    """``reload_dataloaders_every_n_epochs=1``: Lightning asks ``train_dataloader()`` and
    ``val_dataloader()`` again each epoch. Each new training loader reads every sample once,
    from the second epoch on from the cache alone. Unnamed, each is a job of its own (a new
    DataLoader starts its own epochs too), and one Lightning let go leaves the cache's live
    jobs; named (``job=``), each joins that job, taking it over from the loader it replaces."""
    import gc
    import weakref

    import redis

    model = Classifier(str(tiny_dataset), redis_url)
    made = []
    make = model.loader

    def loader(stage, **kwargs):
        if stage == "train" and name is not None:
            kwargs["job"] = name
        made.append((stage, weakref.ref(made_now := make(stage, **kwargs)), made_now.job))
        return made_now

    model.loader = loader
    trainer(tmp_path, max_epochs=3, reload_dataloaders_every_n_epochs=1).fit(model)
    trains = [(ref, job) for stage, ref, job in made if stage == "train"]
    assert len(trains) == 3
    assert len({job for _, job in trains}) == (3 if name is None else 1)
    samples = everything(tiny_dataset)
    for stage in ("train", "val"):
        for epoch in ("0", "1", "2"):
            seen = model.seen[stage][epoch]
            assert len(seen) == 48 and set(seen) == samples, (stage, epoch)
    assert [s["storage_reads"] for s in model.stats[1:]] == [0, 0], model.stats
    if name is not None:
        return
    gc.collect()
    gone = [job for ref, job in trains if ref() is None]
    assert gone, "Lightning still holds every training loader it replaced"
    client = redis.Redis.from_url(redis_url)
    live = {
        n.decode().partition("|")[0]
        for key in client.scan_iter(match="seneca:{*}:jobs")
        for n in client.zrange(key, 0, -1)
    }
    assert not live & set(gone), (live, gone)


def test_a_training_loader_without_ods_checkpoints_and_resumes(tiny_dataset, redis_url, tmp_path):
    """A training loader in the order it is given (``shuffle=False``: no ODS) saves with
    Lightning's checkpoint (its state is empty, as DataLoader has none) and resumes from it:
    the next epoch reads every sample once, from the cache."""
    model = Classifier(str(tiny_dataset), redis_url)
    make = model.loader

    def in_order(stage, **kwargs):
        return make(stage, **{**kwargs, "shuffle": False})

    model.loader = in_order
    trainer(tmp_path, max_epochs=1).fit(model)
    [ckpt] = (tmp_path / "checkpoints").glob("epoch=0-*.ckpt")
    resumed = Classifier(str(tiny_dataset), redis_url)
    resumed.loader = lambda stage, **kwargs: Classifier.loader(
        resumed, stage, **{**kwargs, "shuffle": False}
    )
    trainer(tmp_path, max_epochs=2).fit(resumed, ckpt_path=str(ckpt))
    seen = resumed.seen["train"]["1"]
    assert list(resumed.seen["train"]) == ["1"]
    assert len(seen) == 48 and set(seen) == everything(tiny_dataset)
    assert resumed.stats[0]["storage_reads"] == 0, resumed.stats
