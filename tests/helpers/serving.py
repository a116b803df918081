"""Loops the ODS and fault tests share: serve a store's epoch, fill a loader's encoded tier."""

import time

from helpers.indexed import indexed
from seneca import SenecaLoader


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
