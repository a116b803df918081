"""Correct to the sample: two jobs that share augmented copies each get, for every sample, a
crop of that sample's image, whoever made it (read from the cache, claimed, or decoded). Each
image is one flat grey whose level names the sample, so any crop of it shows which sample it
is."""

import pytest
from helpers.greys import grey_dataset, make_greys

from seneca import SenecaLoader

SAMPLES = 60


@pytest.fixture(scope="module")
def greys(tmp_path_factory):
    return make_greys(tmp_path_factory.mktemp("greys") / "data", SAMPLES)


@pytest.mark.parametrize("workers", [0, 2])
def test_jobs_sharing_crops_get_each_sample_s_own(greys, redis_url, workers):
    ds, levels = grey_dataset(greys)
    common = dict(batch_size=8, shuffle=True, cache=redis_url, split=(0, 0, 1), num_workers=workers)
    a = SenecaLoader(ds, job="a", **common)
    b = SenecaLoader(ds, job="b", **common)
    wrong, served = [], 0
    for _ in range(3):
        for (xa, ya), (xb, yb) in zip(a, b, strict=True):
            for image, i in [*zip(xa, ya, strict=True), *zip(xb, yb, strict=True)]:
                served += 1
                if abs(float(image.mean()) * 255 - levels[int(i)]) > 3:
                    wrong.append((int(i), round(float(image.mean()) * 255, 1)))
    hits = a.stats()["augmented"]["hits"] + b.stats()["augmented"]["hits"]
    a.close()
    b.close()
    assert served == 2 * 3 * SAMPLES
    assert hits > 30  # crops were shared (each job reads only the other's)
    assert wrong == []
