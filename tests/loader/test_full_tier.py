"""A full augmented tier keeps taking crops: each crop a job makes while another job is live
is offered to the cache, full or not, and the policy decides what stays (it evicts copies the
live jobs need less). A loader that stopped offering once the tier looked full kept whatever
filled it, copies nobody needed any more among them, while every new crop was thrown away."""

from helpers.greys import grey_dataset, make_greys

from seneca import SenecaLoader


def test_every_crop_made_beside_another_job_is_offered_to_a_full_tier(tmp_path, redis_url):
    ds, _ = grey_dataset(make_greys(tmp_path / "data", 60))
    # room for about 4 of the 60 crops
    common = dict(batch_size=8, shuffle=True, cache=redis_url, split=(0, 0, 1), cache_size=4000)
    a = SenecaLoader(ds, job="a", **common)
    b = SenecaLoader(ds, job="b", **common)
    for _ in range(2):  # a runs 2 batches ahead of b
        ia, ib = iter(a), iter(b)
        for k, _batch in enumerate(ia):
            if k >= 2:
                next(ib)
        for _batch in ib:
            pass
    sa, sb = a.stats(), b.stats()
    a.close()
    b.close()
    # b was never alone: every crop it made was offered, and most found the tier full
    assert sb["augmented"]["admitted"] + sb["augmented"]["full"] == sb["decodes"]
    assert sb["augmented"]["full"] > 0 and sa["augmented"]["full"] > 0
