"""One rank of the data-parallel tests (run by torchrun from loader/test_ddp.py; not a test itself).

Modes: ``epochs`` (two epochs), ``named`` (two epochs under the job name ``ddp-named``),
``sharded`` (two epochs, the metadata in shards of 16 samples, on the cache at ``sharded_url``),
``stopA`` (two batches of epoch 0 under the job name ``ddp-A``, then save this rank's
state_dict), ``resumeA`` (load this rank's state in a new process group, finish the epoch);
``stopB`` and ``resumeB`` the same under ``ddp-B``, except that every rank loads rank 0's
state (as Lightning's checkpoints keep it). Several modes, comma-separated, run in
turn in the same processes, each with a loader of its own (fewer interpreters to start)."""

import json
import sys

import torch
import torch.distributed as dist
from indexed import indexed  # this script's own folder is on sys.path
from torch.utils.data import DistributedSampler

from ods import defaults as ods_defaults
from seneca import SenecaLoader

#: every all-reduced tensor, held until the process group is gone: torch 2.6's gloo frees a
#: finished reduce's tensors in its own thread, which needs the GIL for the last reference;
#: destroy_process_group joins that thread holding the GIL (both waited forever)
_REDUCED: list = []


def _lockstep() -> None:
    step = torch.ones(1)
    dist.all_reduce(step)  # as DDP's gradient all-reduce keeps the ranks together
    _REDUCED.append(step)


def main(data: str, url: str, out: str, modes: str = "epochs", sharded_url: str = "") -> None:
    dist.init_process_group("gloo")
    for mode in modes.split(","):
        run(data, sharded_url if mode == "sharded" else url, out, mode, dist.get_rank())
    dist.destroy_process_group()


def run(data: str, url: str, out: str, mode: str, rank: int) -> None:
    """One mode's loader and report."""
    if mode == "sharded":
        ods_defaults.SHARD_SIZE = 16
    ds = indexed(data)
    job = {"epochs": None, "sharded": None, "named": "ddp-named"}.get(mode, f"ddp-{mode[-1]}")
    loader = SenecaLoader(ds, batch_size=5, shuffle=True, num_workers=1, cache=url, job=job)
    shown = loader.sampler  # a DistributedSampler of this rank (Lightning leaves it as it is)
    report: dict = {
        "job": loader.job,
        "len": len(loader),
        "sampler": [isinstance(shown, DistributedSampler), shown.num_replicas, shown.rank],
        "sampler_len": len(shown),
    }
    if mode in ("epochs", "named", "sharded"):
        report["epochs"] = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            got = []
            for _, y in loader:
                got += [int(i) for i in y]
                _lockstep()
            report["epochs"].append(got)
    elif mode.startswith("stop"):
        it = iter(loader)
        got = []
        for _ in range(2):
            got += [int(i) for i in next(it)[1]]
            _lockstep()
        state = loader.state_dict()
        report.update(seen=got, state={**state, "consumed": list(state["consumed"])})
    else:  # resumeA: from rank A's saved state in every rank (Lightning keeps rank 0's)
        with open(f"{out}/stop{mode[-1]}{rank if mode[-1] == 'A' else 0}.json") as f:
            state = json.load(f)["state"]
        loader.load_state_dict({**state, "consumed": bytes(state["consumed"])})
        got = []
        for _, y in loader:
            got += [int(i) for i in y]
            _lockstep()
        report["seen"] = got
    with open(f"{out}/{mode}{rank}.json", "w") as f:
        json.dump(report, f)
    loader.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
