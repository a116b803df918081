"""SenecaLoader with ODS: batches decided in Redis, fetched from the decided tier."""

import collections
import logging
import threading

import PIL
import pytest
import redis
from helpers.indexed import indexed
from helpers.waiting import wait_for

from seneca import SenecaLoader
from seneca.pipeline.fingerprint import libraries
from seneca_base.errors import ConfigError


def epoch_of(loader):
    return collections.Counter(int(i) for _, y in loader for i in y)


def test_ods_is_the_default_when_shuffling(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB")
    assert loader.ods and loader.batch_size == 8 and len(loader) == 6
    first = epoch_of(loader)
    assert set(first) == set(range(48)) and max(first.values()) == 1
    second = epoch_of(loader)
    assert set(second) == set(range(48)) and max(second.values()) == 1
    stats = loader.stats()
    assert stats["samples"] == 96
    hits = sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded"))
    assert hits >= 40  # the first epoch filled the cache (20 MB holds all 48)
    assert not SenecaLoader(ds, batch_size=8, cache=redis_url).ods  # shuffle=False: in order


def test_two_jobs_share_and_substitute(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    a = SenecaLoader(ds, batch_size=6, shuffle=True, cache=redis_url, cache_size="2MB", job="a")
    b = SenecaLoader(ds, batch_size=6, shuffle=True, cache=redis_url, cache_size="2MB", job="b")
    seen = {"a": collections.Counter(), "b": collections.Counter()}
    for (_, ya), (_, yb) in zip(a, b, strict=True):
        seen["a"].update(int(i) for i in ya)
        seen["b"].update(int(i) for i in yb)
    for c in seen.values():
        assert set(c) == set(range(48)) and max(c.values()) == 1
    subs = {job.job: job.stats()["substitutions"] for job in (a, b)}
    assert sum(subs.values()) > 0, subs
    for job in (a, b):  # every counter counts from the latest reset, substitutions too
        job.reset_stats()
        assert job.stats()["substitutions"] == 0 and job.stats()["samples"] == 0


@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.slow
def test_workers_fetch_decided_batches(tiny_dataset, redis_url, context):
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(
        ds,
        batch_size=5,
        shuffle=True,
        drop_last=True,
        num_workers=2,
        multiprocessing_context=context,
        cache=redis_url,
        cache_size="20MB",
    )
    got = epoch_of(loader)
    assert sum(got.values()) == 45 and max(got.values()) == 1  # 9 full batches
    assert loader.stats()["samples"] == 45


def _cached_in(store, r, tier):
    return [i for i in range(48) if r.getbit(store.tier_key(tier), i)]


def test_values_gone_after_the_decision_are_counted_misses_and_cached_again(
    tiny_dataset, redis_proc
):
    """Values deleted behind ODS's back (evicted by another process) are still decided as hits:
    each is read from storage, counted, and its entry goes so that the miss caches it again."""
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB"
    )
    epoch_of(loader)  # fills the cache
    store, r = loader.store, redis_proc.client
    cached = _cached_in(store, r, "decoded")
    assert cached
    for i in cached:
        r.delete(store.value_key("decoded", i))
    gone, reads = loader.stats()["ods_gone"], loader.stats()["storage_reads"]
    assert epoch_of(loader) == dict.fromkeys(range(48), 1)
    assert loader.stats()["ods_gone"] - gone == len(cached)
    assert loader.stats()["storage_reads"] - reads >= len(cached)
    assert store.cached("decoded", cached) == [True] * len(cached)
    assert all(r.exists(store.value_key("decoded", i)) for i in cached)


def test_a_value_put_in_place_just_after_the_decision_is_read_not_taken_for_gone(
    tiny_dataset, redis_proc, monkeypatch
):
    """An admission's entries are visible a round trip before its values are in place: a fetch
    that finds a decided value missing looks again, briefly, before it reads from storage. The
    value is put back only once the server has answered a read of it."""
    monkeypatch.setattr("seneca.defaults.MISSING_WAIT", 60.0)  # looked for until it is back
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB"
    )
    epoch_of(loader)  # fills the cache
    store, r = loader.store, redis_proc.client
    i = _cached_in(store, r, "decoded")[0]
    key = store.value_key("decoded", i)
    value = r.get(key)
    r.delete(key)
    on, back = threading.Event(), threading.Event()

    def put_back_after_a_read():
        with redis.Redis.from_url(redis_proc.url).monitor() as feed:
            on.set()
            while True:
                command = feed.next_command()["command"].split()
                if command[0] == "MGET" and key in command[1:]:
                    r.set(key, value)
                    back.set()
                    return

    watcher = threading.Thread(target=put_back_after_a_read, daemon=True)
    watcher.start()
    assert on.wait(60)
    reads = loader.stats()["storage_reads"]
    assert epoch_of(loader) == dict.fromkeys(range(48), 1)
    assert back.is_set()
    assert loader.stats()["ods_gone"] == 0 and loader.stats()["storage_reads"] == reads
    assert store.cached("decoded", [i]) == [True] and r.get(key) == value


def test_an_entry_whose_value_went_missing_does_not_stay(tiny_dataset, redis_proc):
    """An augmented copy deleted behind the engine's back (a late eviction's UNLINK after the
    sample was cached again) is dropped at its next read; without that every job would miss
    it until it was evicted."""
    common = dict(batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB")
    a, b = (SenecaLoader(indexed(tiny_dataset), split=(0, 0, 1), **common) for _ in "ab")
    for _ in zip(a, b, strict=True):
        pass
    store, r = a.store, redis_proc.client
    cached = _cached_in(store, r, "augmented")
    assert cached
    for i in cached:
        r.delete(store.value_key("augmented", i))
    gone = sum(job.stats()["ods_gone"] for job in (a, b))
    seen = {job: collections.Counter() for job in "ab"}
    for (_, ya), (_, yb) in zip(a, b, strict=True):
        seen["a"].update(int(i) for i in ya)
        seen["b"].update(int(i) for i in yb)
    assert seen["a"] == seen["b"] == dict.fromkeys(range(48), 1)
    assert sum(job.stats()["ods_gone"] for job in (a, b)) > gone
    for i, held in zip(cached, store.cached("augmented", cached), strict=True):
        assert not held or r.exists(store.value_key("augmented", i))  # dropped, or cached again


def test_a_fetch_releases_its_pins_also_after_a_function_flush(tiny_dataset, redis_proc):
    """The library flushed between two batches (a restarted or flushed server): the next
    release fails for want of its function, and is made again once the library is loaded."""
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB"
    )
    epoch_of(loader)  # fills the cache
    store, r = loader.store, redis_proc.client

    def pinned():
        return sum(r.bitcount(k) for k in r.keys(f"{store.prefix}pin:*"))

    seen: collections.Counter = collections.Counter()
    hits = loader.stats()["decoded"]["hits"]
    for n, (_, y) in enumerate(loader):
        seen.update(int(i) for i in y)
        if n % 2 == 0:
            r.function_flush()
    assert seen == dict.fromkeys(range(48), 1)
    assert loader.stats()["decoded"]["hits"] - hits == 48  # every batch was pinned
    store.outbox.settle()  # the last release's reply is read at the next fetch, or here
    assert pinned() == 0


def test_ods_option_errors(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    with pytest.raises(ConfigError, match="ods=True needs shuffle=True"):
        SenecaLoader(ds, batch_size=8, cache=redis_url, ods=True)
    with pytest.raises(ConfigError, match="ods: expected"):
        SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, ods="yes")
    plain = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, ods=False)
    assert not plain.ods and sum(len(y) for _, y in plain) == 48


def test_set_epoch(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(ds, batch_size=16, shuffle=True, cache=redis_url)
    loader.set_epoch(3)
    assert sum(len(y) for _, y in loader) == 48
    assert loader.batch_sampler.epoch == 4


def test_cache_dying_mid_epoch_finishes_the_epoch_from_storage(tiny_dataset, redis_proc, caplog):
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_proc.url)
    got = collections.Counter()
    it = iter(loader)
    for _ in range(2):
        got.update(int(i) for i in next(it)[1])
    redis_proc.stop()
    with caplog.at_level(logging.WARNING, logger="seneca"):
        for _, y in it:
            got.update(int(i) for i in y)
    assert sum("failed (" in m for m in caplog.messages) == 1  # one warning for the job
    assert set(got) == set(range(48)) and max(got.values()) == 1


def test_no_values_are_sent_to_a_tier_the_split_leaves_empty(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="200KB", split=(0, 0.5, 0.5)
    )
    assert sum(len(y) for _, y in loader) == 48
    stats = loader.stats()
    assert stats["encoded"]["admitted"] == 0 and stats["encoded"]["full"] == 0
    assert stats["decoded"]["admitted"] > 0


def test_loaders_with_and_without_ods_share_one_cache(tiny_dataset, redis_proc):
    ds = indexed(tiny_dataset)
    common = dict(batch_size=8, cache=redis_proc.url, cache_size="20MB", split=(1, 0, 0))
    train = SenecaLoader(ds, shuffle=True, job="train", **common)
    check = SenecaLoader(ds, shuffle=False, job="check", **common)
    assert train.ods and not check.ods
    assert train.store.keys == check.store.keys  # one key schema, one dataset
    epoch_of(train)  # fills the encoded tier
    used = train.store.usage()
    assert used["encoded"] > 0 and check.store.usage() == used  # one budget, one count
    assert sorted(y for _, ys in check for y in ys.tolist()) == list(range(48))
    assert check.stats()["encoded"]["hits"] == 48  # the other loader's values
    assert check.stats()["storage_reads"] == 0
    assert train.store.usage() == used  # nothing admitted twice
    assert sum(used.values()) <= train.cache_size


def test_jobs_with_different_transforms_share_encoded_and_decoded_values(tiny_dataset, redis_proc):
    """Two transforms over one dataset: one key space and budget for the encoded and decoded
    tiers; each transform's augmented copies are its own."""
    from torchvision import transforms as T

    small, large = indexed(tiny_dataset), indexed(tiny_dataset)
    large.transform = T.Compose([T.RandomResizedCrop(24), T.ToTensor()])
    common = dict(batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB")
    a = SenecaLoader(small, split=(0, 1, 0), job="a", **common)
    b = SenecaLoader(large, split=(0, 1, 0), job="b", **common)
    assert a.store.keys.dataset == b.store.keys.dataset
    assert a.store.keys.view != b.store.keys.view
    epoch_of(a)  # decodes every sample into the decoded tier
    assert a.stats()["decoded"]["admitted"] == 48
    seen = epoch_of(b)
    assert set(seen) == set(range(48)) and max(seen.values()) == 1
    shapes = {tuple(x.shape[-2:]) for x, _ in b}
    assert shapes == {(24, 24)}  # b's own transform ran on a's decoded values
    stats = b.stats()
    assert stats["decoded"]["hits"] == 96 and stats["storage_reads"] == 0
    assert a.store.usage()["decoded"] == b.store.usage()["decoded"] > 0


def test_augmented_copies_are_kept_per_transform(tiny_dataset, redis_proc):
    """Augmented copies serve the jobs of their transform only; a transform with one job makes
    none (nobody else could use them), however many jobs other transforms have."""
    from torchvision import transforms as T

    large = indexed(tiny_dataset)
    large.transform = T.Compose([T.RandomResizedCrop(24), T.ToTensor()])
    common = dict(batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB")
    common["split"] = (0, 0, 1)
    a1 = SenecaLoader(indexed(tiny_dataset), job="a1", **common)
    a2 = SenecaLoader(indexed(tiny_dataset), job="a2", **common)
    b = SenecaLoader(large, job="b", **common)
    iter(a1), iter(a2)  # both jobs live from the start
    for (xa, _), (xb, _), (xc, _) in zip(a1, a2, b, strict=True):
        assert xa.shape[-1] == xb.shape[-1] == 16 and xc.shape[-1] == 24
    made = a1.stats()["augmented"]["admitted"] + a2.stats()["augmented"]["admitted"]
    used = a1.stats()["augmented"]["hits"] + a2.stats()["augmented"]["hits"]
    assert made > 0 and used > 0  # a1 and a2 used each other's copies
    assert b.stats()["augmented"]["hits"] == 0 and b.stats()["augmented"]["admitted"] == 0
    assert a1.store.usage()["augmented"] > 0 and b.store.usage()["augmented"] == 0


def test_the_cache_names_a_dataset_by_its_files_and_decoder_and_a_view_by_its_transform(
    tiny_dataset, redis_url, monkeypatch
):
    from torchvision import transforms as T
    from torchvision.datasets.folder import default_loader

    def ids(ds):
        return SenecaLoader(ds, batch_size=8, cache=redis_url).store.keys

    base = ids(indexed(tiny_dataset))
    other_transform = indexed(tiny_dataset)
    other_transform.transform = T.Compose([T.RandomResizedCrop(20), T.ToTensor()])
    keys = ids(other_transform)
    assert keys.dataset == base.dataset and keys.view != base.view
    own_loader = indexed(tiny_dataset)
    own_loader.loader = lambda path: default_loader(path).convert("L")
    assert ids(own_loader).dataset != base.dataset  # its decoded values differ
    fewer = indexed(tiny_dataset)
    fewer.samples = fewer.samples[:-1]
    assert ids(fewer).dataset != base.dataset
    # a job whose Pillow is another build (Pillow-SIMD resizes otherwise): its own values
    random_head = ids(other_transform)
    try:
        monkeypatch.setattr(PIL, "__version__", PIL.__version__ + ".post9")
        libraries.cache_clear()
        elsewhere = ids(other_transform)
    finally:
        monkeypatch.undo()
        libraries.cache_clear()
    assert elsewhere.dataset != random_head.dataset and elsewhere.view != random_head.view


def test_a_loader_leaves_its_job_when_closed_or_collected(tiny_dataset, redis_proc):
    import gc

    r = redis_proc.client
    opts = dict(batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB")

    def jobs(store):
        return {n.decode() for n in r.zrange(store.keys.jobs, 0, -1)}

    closed = SenecaLoader(indexed(tiny_dataset), **opts)
    epoch_of(closed)
    store, name = closed.store, closed.store.keys.job_name(closed.job)
    assert name in jobs(store) and r.exists(f"{store.prefix}j:{name}")
    closed.close()
    assert name not in jobs(store) and not r.exists(f"{store.prefix}j:{name}")

    collected = SenecaLoader(indexed(tiny_dataset), **opts)
    epoch_of(collected)
    name = store.keys.job_name(collected.job)
    del collected
    gc.collect()  # the process's lease keeper leaves for it, off the collector's path
    wait_for(lambda: name not in jobs(store), f"the collected loader's job {name} to leave")
    assert not r.exists(f"{store.prefix}j:{name}")

    named = SenecaLoader(indexed(tiny_dataset), job="keep-me", **opts)
    epoch_of(named)
    del named
    gc.collect()  # a named job may be resumed from a checkpoint: its state stays
    assert store.keys.job_name("keep-me") in jobs(store)


@pytest.mark.parametrize("workers", [0, 1])
def test_misses_a_full_cache_does_not_take_are_not_left_pending(tiny_dataset, redis_proc, workers):
    """Two jobs mark their misses pending for each other; with room for a copy or two, most
    misses are not offered, and each batch's misses end their pending all the same (in the
    loader process or in a worker)."""
    ds = indexed(tiny_dataset)
    opts = dict(batch_size=6, shuffle=True, cache=redis_proc.url, cache_size="1KB")
    a = SenecaLoader(ds, job="a", num_workers=workers, **opts)
    b = SenecaLoader(ds, job="b", num_workers=workers, **opts)
    seen = collections.Counter()
    for (_, ya), (_, yb) in zip(a, b, strict=True):
        seen.update(int(i) for i in [*ya, *yb])
    assert seen == collections.Counter({i: 2 for i in range(48)})
    stats = [loader.stats() for loader in (a, b)]
    misses = sum(s["storage_reads"] for s in stats)
    offered = sum(s[t]["admitted"] + s[t]["full"] for s in stats for t in ("augmented", "decoded"))
    assert misses > 80 and offered + sum(s["encoded"]["admitted"] for s in stats) < misses // 4
    for loader in (a, b):
        loader.store.outbox.settle()
    r, prefix = redis_proc.client, a.store.prefix
    assert sum(r.bitcount(k) for k in r.keys(f"{prefix}pend:*")) == 0
