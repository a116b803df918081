"""The shared buffers a DataLoader worker reuses for its parts of batches: taken while free,
capped, handed back by the loader process, all freed by a new iteration; rows made in them
cross to another process as a name of the buffer (the buffer itself once per iteration)."""

import torch
import torch.multiprocessing as mp

from seneca.loader._bypass import Tagged, collate_part
from seneca.loader._part_buffers import PartBuffers, PartReader, PartRef
from seneca.loader._rows import BatchRows, collate_rows


def test_buffers_are_taken_while_free_up_to_the_cap():
    buffers = PartBuffers(cap=2)
    buffers.begin(1)
    a = buffers.take(100, 400)
    b = buffers.take(500, 400)
    assert a[0] == 0 and a[1].numel() == 401  # capacity and the busy byte
    assert b[0] == 1 and b[1].numel() == 501  # a part larger than the capacity
    assert a[1].is_shared() and b[1].is_shared()
    assert buffers.take(10, 400) is None  # both busy, the cap reached: rows made as before
    buffers.free(0)
    assert buffers.take(450, 400) is None  # the free one is too small
    assert buffers.take(400, 400)[0] == 0
    assert buffers.take(10, 10) is None
    buffers.begin(1)  # the same iteration frees nothing
    assert buffers.take(10, 10) is None
    buffers.begin(2)
    assert buffers.take(10, 10)[0] == 0 and buffers.take(10, 10)[0] == 1


def test_a_buffer_is_sent_with_its_first_part_of_an_iteration():
    buffers = PartBuffers(cap=1)
    reader = PartReader()
    buffers.begin(1)
    rows = torch.arange(12, dtype=torch.int16).reshape(2, 2, 3)
    for sent in (True, False, False):
        slot, buffer = buffers.take(rows.numel() * 2, rows.numel() * 2)
        buffer[: rows.numel() * 2].view(torch.int16).copy_(rows.flatten())
        ref = buffers.ref(slot, rows)
        assert (ref.buffer is not None) == sent and ref.nbytes == 24
        assert torch.equal(reader.rows(ref), rows)
        reader.release(ref)
    buffers.begin(2)
    reader.clear()
    slot, _ = buffers.take(24, 24)
    assert buffers.ref(slot, rows).buffer is not None


def test_rows_of_any_dtype_are_made_in_a_free_buffer():
    buffers = PartBuffers(cap=1)
    buffers.begin(1)
    rows = BatchRows(3, buffers, capacity=4)
    samples = [rows.settle(k, (torch.full((2, 3), k + 0.5), k)) for k in range(3)]
    images, targets = collate_rows(samples)
    assert images is rows.rows and rows.slot == 0 and targets.tolist() == [0, 1, 2]
    assert images.dtype == torch.float32 and images.is_contiguous()
    assert images[:, 0, 0].tolist() == [0.5, 1.5, 2.5]
    buffer = buffers._buffers[0]
    assert images.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    assert buffer.numel() == 4 * 6 * 4 + 1  # room for a whole batch, and the busy byte
    other = BatchRows(2, buffers, capacity=4)  # the only buffer is busy: rows of their own
    other.settle(0, (torch.zeros(2, 3), 0))
    assert other.slot is None and other.rows is not None


def _worker(tag, out, back):
    """A worker's parts: rows of a BatchRows made in its buffers, collated and sent."""
    buffers = PartBuffers(cap=2)
    buffers.begin(tag)
    for k in range(4):
        part = Tagged()
        part.tag = k
        part.rows = BatchRows(3, buffers, capacity=4)
        samples = [(torch.full((2, 5), k * 10 + j, dtype=torch.uint8), j) for j in range(3)]
        part.extend(part.rows.settle(j, s) for j, s in enumerate(samples))
        out.put(collate_part(part))
        back.get()  # the loader copied the part's rows


def test_rows_cross_to_another_process_in_reused_buffers():
    ctx = mp.get_context("spawn")
    out, back = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_worker, args=(7, out, back))
    proc.start()
    reader, sent = PartReader(), []
    for k in range(4):
        tag, images, targets = out.get(timeout=60)
        assert tag == k and isinstance(images, PartRef) and targets == [0, 1, 2]
        sent.append(images.buffer is not None)
        rows = reader.rows(images)
        assert rows.shape == (3, 2, 5)
        assert rows[:, 0, 0].tolist() == [k * 10, k * 10 + 1, k * 10 + 2]
        reader.release(images)
        back.put(None)
    proc.join(60)
    assert proc.exitcode == 0
    # handed back each time, the first buffer is reused: sent once
    assert sent == [True, False, False, False]
