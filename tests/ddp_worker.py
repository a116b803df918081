"""One rank of the data-parallel test (run by torchrun from test_ddp.py; not a test itself)."""

import json
import sys

import torch
import torch.distributed as dist
from indexed import indexed

from seneca import SenecaLoader


def main(data: str, url: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = indexed(data)
    loader = SenecaLoader(ds, batch_size=5, shuffle=True, num_workers=1, cache=url)
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        got = []
        for _, y in loader:
            got += [int(i) for i in y]
            step = torch.ones(1)
            dist.all_reduce(step)  # lock step, as DDP's gradient all-reduce keeps the ranks
        epochs.append(got)
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump({"job": loader.job, "len": len(loader), "epochs": epochs}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
