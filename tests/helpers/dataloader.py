"""SenecaLoader held to DataLoader's batches over the same dataset, bit for bit."""

import torch
from torch.utils.data import DataLoader

from seneca import SenecaLoader


def same_as_dataloader(ds, url, **kw):
    """SenecaLoader's batches of two epochs (the second from the cache) against DataLoader's,
    bit for bit and dtype for dtype; the loader's storage reads."""
    want = list(DataLoader(ds, batch_size=4))
    loader = SenecaLoader(ds, batch_size=4, cache=url, split=(0.0, 1.0, 0.0), **kw)
    try:
        for _ in range(2):
            got = list(loader)
            assert len(got) == len(want)
            for (gx, gy), (wx, wy) in zip(got, want, strict=True):
                assert gx.dtype == wx.dtype and torch.equal(gx, wx) and torch.equal(gy, wy)
        return loader.stats()["storage_reads"]
    finally:
        loader.close()
