"""Batch slots: the memory a batch is made in, shared by the training process and its workers.
Lent while free, given back at once or once a copy's event completes, dropped with their file
when a loop is cut short; a worker maps the file the desk names and makes its rows in it."""

import logging
import multiprocessing
import os

import pytest
import torch
from helpers.shm import made_here

from seneca.loader._rows import BatchRows, InSlot, Tagged, collate_part
from seneca.loader._slots import BatchSlots, Lent, SlotLayout, SlotMaps, released
from seneca.loader._tickets import SlotBatch


class _Copy:
    """What ``release`` takes for a copy under way (a CUDA event's ``query``/``synchronize``):
    done when the test says so."""

    def __init__(self):
        self.done = False

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


def test_slots_are_lent_while_free_and_given_back():
    slots = BatchSlots(2, rows=4)
    assert slots.take() is None  # no layout yet: the first batch is made without a slot
    slots.fit(torch.uint8, (2, 3))
    slots.fit(torch.float32, (9,))  # the first layout stays
    a, b = slots.take(), slots.take()
    assert (a.index, b.index) == (0, 1) and a.layout is b.layout and slots.stats()["memory"] == 1
    assert a.tensor.shape == (4, 2, 3) and a.tensor.dtype == torch.uint8
    assert a.tensor.data_ptr() + 24 == b.tensor.data_ptr()  # one file, slot after slot
    assert slots.take() is None and slots.stats()["without_slot"] == 1  # every slot lent
    slots.release(a)
    assert slots.take().index == 0
    copy = _Copy()
    slots.release(b, copy)
    assert slots.take() is None  # its copy is under way
    copy.done = True
    assert slots.take().index == 1 and slots.stats()["without_slot"] == 2


def test_a_loop_cut_short_drops_the_slots_still_lent():
    slots = BatchSlots(2, rows=1)
    slots.fit(torch.uint8, (5,))
    a = slots.take()
    copy = _Copy()
    slots.release(a, copy)
    slots.renew()  # nothing lent: the slots stay
    kept = slots.take()
    assert kept.index == 1 and kept.layout is a.layout and not copy.done
    slots.renew()  # one lent (a worker may still write into it): the file goes
    assert copy.done  # the copy out of the other one was waited for
    fresh = slots.take()
    assert fresh.layout is not a.layout and fresh.layout.name != a.layout.name
    assert slots.stats()["memory"] == 2
    slots.release(kept)  # a slot of the file before: nothing to give back
    assert slots.take().index == 1 and slots.take() is None


def test_no_room_for_slots_warns_once_and_lends_none(caplog):
    slots = BatchSlots(1, rows=1 << 20)
    slots.fit(torch.float64, (1 << 20,))  # 8 TB
    with caplog.at_level(logging.WARNING, logger="seneca"):
        assert slots.take() is None and slots.take() is None
    assert caplog.text.count("no shared memory for 1 batch slots") == 1


def _worker(described, fd, index, n, out):
    """A worker's part: a batch of ``n`` samples made in slot ``index`` of the slots handed to
    it."""
    named, maps = SlotLayout.decode(described), SlotMaps()
    maps.take(named, os.dup(fd))  # what the desk hands over (here inherited: a fork)
    part = Tagged()
    part.tag = 3
    part.slot = Lent(named, index, maps.tensor(index))
    part.rows = BatchRows.over(part.slot.tensor[:n])
    samples = [(torch.full((2, 3), 10 + k, dtype=torch.uint8), k) for k in range(n)]
    part.extend(part.rows.settle(k, s) for k, s in enumerate(samples))
    tag, images, targets, swaps = collate_part(part)
    out.put((tag, images.index if isinstance(images, InSlot) else None, targets, swaps))


def test_a_worker_makes_its_rows_in_the_slot_the_desk_named():
    before = set(os.listdir("/dev/shm"))
    slots = BatchSlots(3, rows=4)
    slots.fit(torch.uint8, (2, 3))
    slots.take()
    lent = slots.take()
    assert not made_here(before)  # no name: a killed job leaves nothing there
    lent.tensor.zero_()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    args = (lent.layout.encode(), lent.fd, lent.index, 3, out)
    proc = ctx.Process(target=_worker, args=args)
    proc.start()
    assert out.get(timeout=60) == (3, 1, [0, 1, 2], None)  # only the slot's number crossed
    proc.join(60)
    assert proc.exitcode == 0
    assert lent.tensor[:, 0, 0].tolist() == [10, 11, 12, 0]  # the batch's 3 rows, in place


def test_a_batch_leaves_its_slot_before_the_slot_is_lent_again():
    slots = BatchSlots(1, rows=2)
    slots.fit(torch.uint8, (3,))
    lent = slots.take()
    lent.tensor.fill_(7)
    batch = SlotBatch([lent.tensor, torch.tensor([0, 1])])
    batch.slot = lent
    (out,) = released(iter([batch]), slots)
    assert out[0].data_ptr() != lent.tensor.data_ptr()  # the loop may keep it: copied
    assert out[0].tolist() == [[7, 7, 7], [7, 7, 7]]
    again = slots.take()
    assert again.index == lent.index
    again.tensor.zero_()
    assert out[0].sum() == 42  # the batch the loop has is not the slot reused


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_slot_copied_to_the_device_is_reused_after_the_copy():
    from seneca.loader._device import DeviceFeed, pin_host

    slots = BatchSlots(1, rows=64, pin=pin_host)
    slots.fit(torch.uint8, (3, 224, 224))
    lent = slots.take()
    assert lent.tensor.is_pinned()
    lent.tensor.fill_(3)
    batch = SlotBatch([lent.tensor, torch.arange(64)])
    batch.slot = lent
    feed = DeviceFeed(torch.device("cuda", torch.cuda.current_device()), None)
    (staged,) = released(iter([feed.stage(batch)]), slots)
    assert feed.buffers.made == 0  # copied straight from the pinned slot
    again = slots.take()  # once the copy's event has completed
    assert again.index == lent.index and staged.done.query()
    again.tensor.zero_()
    assert int(feed.hand_over(staged)[0].float().mean()) == 3
    slots.close()
