"""With workers, a batch is decided when its worker starts it (``seneca.loader._desk``), not
when DataLoader hands the worker its ticket ``prefetch_factor`` batches ahead."""

import collections
import itertools
import json
import multiprocessing
import os
import signal
import time

import pytest
import torch
from helpers.indexed import indexed
from torchvision.transforms import v2

from ods.decision import Pick
from seneca import SenecaLoader
from seneca.loader._desk import Desk, Share
from seneca.loader._slots import BatchSlots
from seneca.pipeline.transforms import default_train_transform
from seneca_base.errors import SenecaError

_SAMPLE_S = 0.03


class _Slow(torch.nn.Module):
    """A transform step that takes a while per sample: a part of 4 takes 0.12 s."""

    def forward(self, x):
        time.sleep(_SAMPLE_S)
        return x


def test_a_batch_is_decided_when_its_worker_starts_it(tiny_dataset, redis_url, tmp_path):
    os.environ["SENECA_TIMELINE"] = str(tmp_path)
    try:
        ds = indexed(tiny_dataset)
        ds.transform = v2.Compose([_Slow(), *default_train_transform(16).transforms])
        loader = SenecaLoader(
            ds, batch_size=4, shuffle=True, num_workers=1, prefetch_factor=4,
            cache=redis_url, cache_size="20MB", job="late",
        )  # fmt: skip
        seen = collections.Counter(i for _, y in loader for i in y.tolist())
    finally:
        del os.environ["SENECA_TIMELINE"]
    assert seen == collections.Counter(range(48))  # every sample once
    (path,) = tmp_path.glob("late-*.jsonl")
    decided = [b["decided"] for b in json.loads(path.read_text())["batches"]]
    gaps = [b - a for a, b in itertools.pairwise(decided)]
    # its one worker asks for the next batch once it made the one before (4 slow samples);
    # decided when handed out, the first 4 would have been decided at once. (How many decided
    # batches wait to be merged at once is the training process's timing, not the worker's: a
    # loop slowed by a busy machine merges late.)
    assert min(gaps) >= 0.6 * 4 * _SAMPLE_S, gaps


def _answers(desk_answer):
    desk = Desk(desk_answer)
    return desk, desk.client()


def test_the_desk_answers_picks_of_every_tier_their_slot_and_no_batch():
    picks = [Pick(7, None, 0), Pick(2**40, "augmented", 3), Pick(0, "encoded", -1)]
    slots = BatchSlots(2, rows=8)
    slots.fit(torch.uint8, (4,))
    lent = slots.take()
    calls = []

    def decide(iteration, tag):
        calls.append((iteration, tag))
        if tag >= 2:
            return None
        return Share(picks, lent, 2**33) if tag == 1 else Share(picks)

    desk, client = _answers(decide)
    try:
        share = client.ask(5, 1)
        assert share.picks == picks
        assert share.slot.index == lent.index and share.slot.layout == lent.layout
        assert share.epoch == 2**33  # the epoch whose misses the worker may swap late
        share.slot.tensor[5] = 9  # the slot itself, mapped in the worker
        assert lent.tensor[5].tolist() == [9, 9, 9, 9]
        assert client.ask(5, 2) is None  # no batch
        share = client.ask(6, 0)
        assert share.picks == picks and share.slot is None and share.epoch is None
        assert client.ask(6, 1).slot.layout == lent.layout  # named once, known after
        assert calls == [(5, 1), (5, 2), (6, 0), (6, 1)] and desk.answered == 4
    finally:
        desk.close()
    with pytest.raises(SenecaError, match="stopped answering"):
        for _ in range(50):  # the thread closes the connection a moment after
            client.ask(5, 0)
            time.sleep(0.02)


def test_a_killed_worker_is_an_error_and_the_next_epoch_serves_every_sample(
    tiny_dataset, redis_url
):
    ds = indexed(tiny_dataset)
    ds.transform = v2.Compose([_Slow(), *default_train_transform(16).transforms])
    loader = SenecaLoader(
        ds, batch_size=4, shuffle=True, num_workers=2, cache=redis_url, cache_size="20MB"
    )
    others = {p.pid for p in multiprocessing.active_children()}  # other tests' loaders' workers
    it = iter(loader)
    next(it)
    workers = [p for p in multiprocessing.active_children() if p.pid not in others]
    assert workers
    os.kill(workers[0].pid, signal.SIGKILL)  # with a ticket, or about to ask for one
    with pytest.raises(RuntimeError, match="worker"):
        for _ in it:
            pass
    del it
    seen = collections.Counter(i for _, y in loader for i in y.tolist())
    assert seen == collections.Counter(range(48))


def test_a_failing_decision_answers_no_batch_and_the_desk_goes_on(caplog):
    """A worker never waits forever on a decision that raised: it gets no batch (the loop
    then raises, as a batch's samples that never reached its worker), and the next ticket is
    answered."""

    def decide(iteration, tag):
        if tag == 0:
            raise ValueError("boom")
        return Share([Pick(tag, None, 0)])

    desk, client = _answers(decide)
    try:
        with caplog.at_level("ERROR", logger="seneca"):
            assert client.ask(1, 0) is None
        assert "deciding ticket 0 failed" in caplog.text
        assert client.ask(1, 1).picks == [Pick(1, None, 0)]
    finally:
        desk.close()


def test_each_ticket_gets_the_next_batch_when_its_worker_asks():
    from seneca.loader._tickets import TicketSampler

    class Batches:  # the sampler: three batches, each served when drawn
        drawn = 0

        def __len__(self):
            return 3

        def check_owned(self):  # the loader's own iteration (OdsBatchSampler's contract)
            return None  # no epoch announced

        def batches(self, epoch=None):
            for k in range(3):
                Batches.drawn += 1
                yield [Pick(10 * k + j, None, 0) for j in range(2)]

    tickets = TicketSampler(Batches())
    try:
        handed = list(itertools.islice(iter(tickets), 3))
        assert Batches.drawn == 0  # handed out, nothing decided
        tag0, tag1, tag2 = (t.batch for t in handed)
        iteration = handed[0].iteration
        # ticket 1's worker starts first: it gets the epoch's first batch, and ticket 0, whose
        # worker has not started, holds nothing (no hits of its own pinned meanwhile)
        assert [p.index for p in tickets.decide(iteration, tag1).picks] == [0, 1]
        assert Batches.drawn == 1
        assert [p.index for p in tickets.decide(iteration, tag0).picks] == [10, 11]
        assert [p.index for p in tickets.decide(iteration, tag0).picks] == [10, 11]  # once
        assert [p.index for p in tickets.decide(iteration, tag2).picks] == [20, 21]
        assert Batches.drawn == 3
        # the parts come in ticket order (DataLoader's in_order); the loop gets the batches in
        # the order they were decided, which state_dict counts as the first ones consumed
        parts = [(t, torch.full((2, 1), t), [t, t], None) for t in (tag0, tag1, tag2)]
        merged = [int(images[0]) for images, _ in tickets.merged(iter(parts))]
        assert merged == [tag1, tag0, tag2]
    finally:
        tickets.close()
        tickets.desk.close()
