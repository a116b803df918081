"""Loops the ODS and fault tests share: serve a store's epoch (also as one of several ranks in
a process of its own), fill a loader's encoded tier. Light to import: a spawned rank imports
this module, not torch."""

import time


def serve_epoch(store, job, batch, step=0.0):
    """Decide ``job``'s batches until its epoch is over, releasing each and admitting its misses
    to the encoded tier (payload-free); ``step`` seconds of training per batch. The samples."""
    got = []
    while True:
        time.sleep(step)
        d = store.decide(job, batch)
        if not d.indices:
            return got
        got += d.indices
        store.release(job, d)
        misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if not t]
        store.admit(job, [(i, "encoded", 1, b"") for i in misses])


def encoded_loader(root, url, shuffle):
    """A loader over ``indexed(root)`` whose encoded tier holds every sample (one epoch run)."""
    from helpers.indexed import indexed
    from seneca import SenecaLoader

    loader = SenecaLoader(
        indexed(root),
        batch_size=8,
        shuffle=shuffle,
        cache=url,
        cache_size="20MB",
        split=(1, 0, 0),
    )
    list(loader)  # caches every sample's file bytes
    return loader


def serve_as_rank(url, dataset, n, batch, barrier, out):
    """One rank of job ``job`` (a spawned process): serve its share of the epoch of ``dataset``
    (``n`` samples, an encoded tier of ``n // 4``) once every rank is at ``barrier``, with a
    2 ms step so that the ranks interleave; put the samples it got on ``out``."""
    import redis

    from ods.store import OdsStore

    store = OdsStore(redis.Redis.from_url(url), dataset, n, capacity={"encoded": n // 4})
    barrier.wait()
    out.put(serve_epoch(store, "job", batch, step=0.002))
