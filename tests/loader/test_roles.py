"""A process's role is asked of torch in one place and passed in: a worker's rows are made in
shared memory and its counters go to its own row; the training process's do not."""

import subprocess
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from seneca.loader._rows import BatchRows
from seneca_base.process import TRAINING, Role, role


class _Roles(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        mine = role()
        rows = BatchRows(1, shared=mine.worker)
        rows.place(0, torch.uint8, (2,))
        return mine.kind, mine.index, mine.row, rows.rows.is_shared()


def test_the_training_process_and_each_worker_know_their_role():
    assert role() == TRAINING and TRAINING.row == 0 and not TRAINING.worker
    assert Role("worker", 2).row == 3
    here = [_Roles()[i] for i in range(2)]
    assert here == [("training", 0, 0, False)] * 2
    loader = DataLoader(_Roles(), batch_size=None, num_workers=2)
    got = sorted(tuple(x) for x in loader)
    assert got == [("worker", 0, 1, True)] * 2 + [("worker", 1, 2, True)] * 2


def test_the_role_is_asked_without_importing_torch():
    """A process that has not imported torch is no DataLoader worker: the base layer (which
    ods shares) answers without importing it."""
    code = (
        "import sys; from seneca_base.process import role; "
        "print(role().kind, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["training", "False"]
