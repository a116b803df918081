"""SenecaLoader under torchrun --nproc_per_node=2 (gloo, CPU): the ranks of one job share its
ODS epoch and together see each sample exactly once."""

import collections
import json
import sys
from pathlib import Path

import pytest
from conftest import RedisProcess
from helpers import warm


def torchrun(data, url, out, modes, sharded_url=""):
    """Two ranks of tests/helpers/ddp_worker.py running ``modes`` (comma-separated) in turn
    (``sharded`` on the cache at ``sharded_url``); each mode's reports: :func:`reports`."""
    helpers = Path(__file__).parents[1] / "helpers"
    # torchrun starts each rank as the command it is given (--no-python): a launcher that has
    # the tests' fork server run `python ddp_worker.py ...` (no torch imported per rank)
    launcher = out / "rank.sh"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{helpers / "warm.py"}" --exec "$@"\n')
    launcher.chmod(0o755)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += ["--no-python", str(launcher), str(helpers / "ddp_worker.py")]
    cmd += [str(data), url, str(out), modes, sharded_url]
    proc = warm.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]


def reports(out, mode):
    """The two ranks' reports of ``mode``."""
    return [json.loads((out / f"{mode}{r}.json").read_text()) for r in range(2)]


def assert_every_epoch_whole(ranks):
    """Each of the two ranks' epochs: 24 samples each, together every sample once."""
    for epoch in range(2):
        shares = [r["epochs"][epoch] for r in ranks]
        assert [len(s) for s in shares] == [24, 24]
        together = collections.Counter(shares[0] + shares[1])
        assert set(together) == set(range(48)) and max(together.values()) == 1


@pytest.mark.slow
def test_two_runs_of_a_job_of_two_ranks(tiny_dataset, redis_proc, tmp_path):
    """Two runs of a job of two ranks, one after the other, on one cache (one test: each
    torchrun starts three processes, and its modes share them). The first: two epochs of a
    job named for its ranks, two epochs under the name ``ddp-named``, then two batches of an
    epoch under ``ddp-A`` and ``ddp-B`` and their states saved; the second, in new processes:
    ``ddp-named`` again, ``ddp-A`` restored from each rank's saved state, ``ddp-B`` from rank
    0's in every rank (as Lightning's checkpoint keeps it), then the dataset in shards on a
    cache of its own."""
    torchrun(tiny_dataset, redis_proc.url, tmp_path, "epochs,named,stopA,stopB")
    first = {m: reports(tmp_path, m) for m in ("epochs", "named", "stopA", "stopB")}
    sharded = RedisProcess()
    try:
        modes = "named,resumeA,resumeB,sharded"
        torchrun(tiny_dataset, redis_proc.url, tmp_path, modes, sharded.url)
        # the ranks share a dataset kept in shards: the dataset registered in shards of 16
        info = [k for k in sharded.client.keys(b"*:info") if sharded.client.hget(k, "shard_size")]
        assert len(info) == 1
    finally:
        sharded.stop()
    second = {m: reports(tmp_path, m) for m in ("named", "resumeA", "resumeB", "sharded")}
    assert_every_epoch_whole(second["sharded"])

    # the ranks share one job and its epochs: 24 samples per rank in batches of 5
    ranks = first["epochs"]
    assert ranks[0]["job"] == ranks[1]["job"] and ranks[0]["job"].startswith("ddp:")
    assert ranks[0]["len"] == ranks[1]["len"] == 5
    assert [r["sampler"] for r in ranks] == [[True, 2, 0], [True, 2, 1]]
    assert [r["sampler_len"] for r in ranks] == [24, 24]
    assert_every_epoch_whole(ranks)

    # a second run under the same job name is a new run (no state loaded): its epochs are
    # whole, not counted as served by the run before (whose state stays in the cache)
    for run in (first, second):
        ranks = run["named"]
        assert ranks[0]["job"] == ranks[1]["job"] == "ddp-named"
        assert_every_epoch_whole(ranks)

    # ranks resume from their own states, in new processes; or all from rank 0's, each
    # rank's own place read back from the cache
    for stop, resume in (("stopA", "resumeA"), ("stopB", "resumeB")):
        before, after = first[stop], second[resume]
        assert [r["state"]["batches"] for r in before] == [2, 2]
        assert [r["state"]["rank"] for r in before] == [0, 1]
        for b, a in zip(before, after, strict=True):
            assert len(b["seen"]) + len(a["seen"]) == 24  # each rank's share, none padded
        together = collections.Counter(x for r in before + after for x in r["seen"])
        assert set(together) == set(range(48)) and max(together.values()) == 1, resume
