"""split="auto": the plan made from measured inputs, stored once per dataset, adopted by every
loader, changed with hysteresis, and tiers shrunk to a new split; on a real redis-server."""

import logging
import time

import pytest

from mdp import plan, predict
from ods.store import OdsStore
from seneca import defaults
from seneca._autoplan import (
    AutoPlanner,
    PlanRecord,
    Setting,
    measured_inputs,
    plan_for,
    spec_of,
)
from seneca._autoplan.inputs import source_of
from seneca.loader._stats import Counters
from seneca_base.split import Split
from seneca_base.tiers import TIERS

SIZE = 50_000_000  # half of the 1,000 samples below (100 KB each)
#: a job's counters after 300 samples from storage: 2 ms a decode, 1 ms a transform, 100 KB
#: read in 0.2 ms each, 500 KB decoded, 150 KB augmented; and 256 hits: 1 MB read from the
#: cache in 1 ms
MEASURED = {
    "samples": 556,
    "hits_decoded": 256,
    "decodes": 300,
    "transforms": 300,
    "ns_decode": 300 * 2_000_000,
    "ns_transform": 300 * 1_000_000,
    "storage_reads": 300,
    "bytes_storage": 300 * 100_000,
    "ns_storage": 300 * 200_000,
    "bytes_encoded": 300 * 100_000,
    "bytes_decoded": 300 * 500_000,
    "bytes_augmented": 300 * 150_000,
    "augmented_made": 300,
    "bytes_cache": 1_000_000,
    "ns_cache": 1_000_000,
}


def test_inputs_are_measured_from_the_counters_once_there_are_enough():
    m = measured_inputs(MEASURED, jobs=2, workers=1)  # two processes decode at once
    assert m["node.decode_augment_samples_per_s"] == pytest.approx(2 / 0.003)
    assert m["node.augment_samples_per_s"] == pytest.approx(2 / 0.001)
    assert m["storage.bandwidth_mbyte_per_s"] == pytest.approx(2 * 500)
    assert m["cache.bandwidth_gbit_per_s"] == pytest.approx(2 * 8)
    assert m["dataset.sample_kb"] == pytest.approx(100)
    assert m["dataset.inflation"] == pytest.approx(5)
    assert m["dataset.augmented_ratio"] == pytest.approx(0.3)
    few = {k: v // 300 * (defaults.AUTO_WARMUP_SAMPLES - 1) for k, v in MEASURED.items()}
    assert measured_inputs(few, jobs=1, workers=0) == {}


def test_a_plan_is_measured_only_once_its_cpu_rates_are():
    # the cache's bandwidth measured after 256 samples read from it, the decodes not yet:
    # the rates are still the defaults, and so is the plan
    cache_only = {"samples": 300, "hits_encoded": 256, "bytes_cache": 10**6, "ns_cache": 10**6}
    measured = measured_inputs(cache_only, jobs=1, workers=1)
    assert list(measured) == ["cache.bandwidth_gbit_per_s"]
    # ... not from fewer reads, however many samples came from storage meanwhile
    few = {**cache_only, "samples": 10_000, "hits_encoded": 255}
    assert measured_inputs(few, jobs=1, workers=1) == {}
    assert source_of(measured) == "defaults"
    assert source_of(measured_inputs(MEASURED, jobs=1, workers=1)) == "measured"
    # a transform with no random head: the decode's rate alone makes it measured
    decodes = {k: v for k, v in MEASURED.items() if "transform" not in k}
    assert source_of(measured_inputs(decodes, jobs=1, workers=1, head=False)) == "measured"
    assert source_of(measured_inputs(decodes, jobs=1, workers=1)) == "defaults"


def _planner(
    client, job="a", workers=1, samples=1000, measured=True, others=(), size=SIZE, tiers=TIERS
):
    store = OdsStore(client, "ds1", samples, values=True, overhead=96, seed=1, view="v")
    for name in (*others, job):
        store.join(name)
    counters = Counters(rows=1)
    if measured:
        counters.add(0, MEASURED)
    setting = Setting(samples, size, workers, True, {}, tiers)
    return AutoPlanner(store, job, counters, setting)


def _put(planner, split, source="measured", age_s=0.0, version=3, jobs=None, evidence=0):
    at = planner.store.now_ms() - int(age_s * 1000)
    inputs = {} if jobs is None else {"cluster.jobs": jobs}
    if not isinstance(split, Split):
        split = Split.from_percent(split)
    record = PlanRecord(
        split, version, source, 1.0, by="elsewhere", at_ms=at, inputs=inputs, evidence=evidence
    )
    planner.store.client.set(planner.store.keys.plan, record.to_json())


def _stored(planner):
    return PlanRecord.from_json(planner.store.client.get(planner.store.keys.plan))


def test_the_first_loader_plans_from_defaults_and_stores_the_plan(redis_proc):
    p = _planner(redis_proc.client, measured=False)
    record = p.start()
    assert _stored(p) == record and record.version == 1 and record.source == "defaults"
    spec = spec_of(p.setting, {}, 1)
    assert record.split == plan_for(spec).split  # what MDP plans for the defaults
    assert p.store.capacity == record.as_split().budgets(SIZE)
    assert record.inputs["dataset.samples"] == 1000 and record.measured == ()


def test_a_lone_job_plans_only_the_tiers_it_reads(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.0)
    p = _planner(redis_proc.client, measured=False, size=SIZE // 25)  # 2% of the dataset
    first = p.start()
    assert first.split.percent[2] == 0  # a lone job never reads a crop it made: no augmented share
    assert first.split == plan_for(spec_of(p.setting, {}, 1), ("encoded", "decoded")).split
    p.store.join("b")  # with another job the crops are read, but all augmented gains less
    two = spec_of(p.setting, {}, 2)  # than filling a cache costs: the split stays
    assert plan(two, min_gain=0.02).split.percent == (0, 0, 100)
    assert plan(two).throughput <= predict(two, first.split).throughput * 1.02
    p.tick(force=True)
    assert _stored(p).split == first.split and _stored(p).inputs["cluster.jobs"] == 2


def test_a_transform_without_a_random_head_never_plans_an_augmented_tier(redis_proc):
    p = _planner(redis_proc.client, others=("b", "c"), tiers=("encoded", "decoded"))
    assert not p.setting.head
    assert p.start().split.percent[2] == 0
    _put(p, (0, 0, 100), age_s=defaults.AUTO_REPLAN_INTERVAL + 1, jobs=3)
    p.tick(force=True)  # a share nobody reads is given back at the next look
    assert _stored(p).split.percent[2] == 0 and _stored(p).version == 4


def test_jobs_agree_on_the_stored_plan_and_follow_its_changes(redis_proc):
    first, second = _planner(redis_proc.client, "a"), _planner(redis_proc.client, "b")
    _put(first, (10, 20, 70))
    assert first.start().split.percent == second.start().split.percent == (10, 20, 70)
    _put(first, (30, 30, 40), version=4)  # another loader changed it
    second.tick(force=True)
    assert second.split.fractions == {"encoded": 0.3, "decoded": 0.3, "augmented": 0.4}
    assert second.store.capacity["augmented"] == int(0.4 * SIZE)
    assert [r.split.percent for r in second.history] == [(10, 20, 70), (30, 30, 40)]


def _gain(planner, split, jobs=3):
    spec = spec_of(planner.setting, measured_inputs(MEASURED, jobs, 1), jobs)
    return plan_for(spec).throughput / predict(spec, split).throughput - 1


def test_a_split_changes_only_for_a_large_enough_gain_and_not_too_often(redis_proc, caplog):
    p = _planner(redis_proc.client, others=("b", "c"))  # three live jobs
    worst = Split.from_percent((100, 0, 0))
    assert _gain(p, worst) > defaults.AUTO_REPLAN_GAIN  # (the inputs make it a poor split)
    _put(p, worst, age_s=1)  # measured a second ago: too recent to change
    p.start()
    p.tick(force=True)
    assert _stored(p).split == worst and p.record.split == worst
    _put(p, worst, age_s=defaults.AUTO_REPLAN_INTERVAL + 1)
    with caplog.at_level(logging.INFO, logger="seneca"):
        p.tick(force=True)
    new = _stored(p)
    assert new.split != worst and new.version == 4 and new.by == "a"
    assert new.gain == pytest.approx(_gain(p, worst))
    assert "node.decode_augment_samples_per_s" in new.measured
    assert p.record == new and new.previous == worst
    # as `seneca cache status` shows it, naming the dataset
    assert f"cache plan for ds1: {new.describe()}" in caplog.text
    assert "(version 4, measured, 3 jobs)" in new.describe() and "over 100-0-0" in new.describe()
    # a split within the gain threshold of the best stays, however old
    near = next(
        s
        for s in map(Split.from_percent, [(0, 5, 95), (5, 0, 95), (0, 10, 90), (10, 0, 90)])
        if s != new.split and _gain(p, s) <= defaults.AUTO_REPLAN_GAIN
    )
    _put(p, near, age_s=defaults.AUTO_REPLAN_INTERVAL + 1, version=9)
    p.tick(force=True)
    assert _stored(p).version == 9 and _stored(p).split == near


def test_a_job_joining_or_leaving_re_plans_once_the_jobs_settle(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.3)
    # planned for 1 job a second ago; 3 live jobs now make another split pay more than 10%
    p = _planner(redis_proc.client, others=("b", "c"))
    one = plan_for(spec_of(p.setting, measured_inputs(MEASURED, 1, 1), 1)).split
    assert _gain(p, one) > defaults.AUTO_REPLAN_GAIN  # (the inputs make it so)
    _put(p, one, age_s=1, jobs=1)
    p.start()
    p.tick(force=True)  # 3 jobs seen for the first time: they may be a passing blip
    assert _stored(p).split == one
    time.sleep(0.35)
    p.tick(force=True)  # still 3 jobs, for longer than AUTO_JOBS_SETTLE: re-planned
    assert _stored(p).split != one and _stored(p).inputs["cluster.jobs"] == 3
    _put(p, one, age_s=1, jobs=3)  # planned for the jobs there are: too recent to change
    p.tick(force=True)
    assert _stored(p).split == one


def test_a_job_count_that_flaps_does_not_move_the_split(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.5)
    p = _planner(redis_proc.client, others=("b",))
    _put(p, (0, 90, 10), age_s=1, jobs=2)
    p.start()
    for _ in range(6):  # job b's lease lapses and comes back, again and again
        p.store.leave("b")
        p.tick(force=True)
        p.store.join("b")
        p.tick(force=True)
        time.sleep(0.1)
    assert _stored(p).split.percent == (0, 90, 10) and _stored(p).version == 3


def test_a_plan_on_defaults_never_replaces_a_measured_one(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.0)
    p = _planner(redis_proc.client, measured=False, others=("b", "c"))
    _put(p, (50, 50, 0), age_s=defaults.AUTO_REPLAN_INTERVAL + 1, jobs=1)
    p.start()
    p.tick(force=True)  # 3 jobs now, nothing measured here: the measured plan stands
    assert _stored(p).split.percent == (50, 50, 0) and _stored(p).version == 3


def test_a_plan_on_defaults_never_empties_a_warm_tier(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.0)
    p = _planner(redis_proc.client, measured=False, others=("b", "c"))
    _put(p, (0, 100, 0), source="defaults", jobs=1)
    p.start()
    s = p.store
    value = b"x" * 100_000  # the decoded tier holds 10% of the cache: warm
    items = [(i, "decoded", s.charge(len(value)), value) for i in range(50)]
    assert s.admit("a", items) == [1] * 50
    three = plan_for(spec_of(p.setting, {}, 3)).split
    # (the defaults for 3 jobs would evict it)
    assert three.percent != (0, 100, 0) and three.decoded < 0.5
    p.tick(force=True)
    assert _stored(p).split.percent == (0, 100, 0) and s.usage()["decoded"] == 50 * s.charge(
        100_000
    )


def test_a_plan_from_defaults_follows_the_jobs_before_anything_is_measured(redis_proc, monkeypatch):
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 0.0)
    p = _planner(redis_proc.client, measured=False)
    first = p.start()
    assert first.inputs["cluster.jobs"] == 1
    for name in ("b", "c"):
        p.store.join(name)  # two more jobs start before this one has measured anything
    p.tick(force=True)
    now = _stored(p)
    assert now.source == "defaults" and now.inputs["cluster.jobs"] == 3
    assert now.split == plan_for(spec_of(p.setting, {}, 3)).split
    assert now.version == first.version + (now.split != first.split)


def test_a_plan_from_defaults_is_replaced_by_the_first_measured_one_at_once(redis_proc):
    p = _planner(redis_proc.client)
    _put(p, (100, 0, 0), source="defaults", age_s=0)
    p.start()
    p.tick(force=True)
    new = _stored(p)
    assert new.source == "measured" and new.split != (100, 0, 0) and new.version == 4


def test_a_tier_given_less_shrinks_but_keeps_entries_in_flight(redis_proc):
    p = _planner(redis_proc.client, measured=False)
    _put(p, (100, 0, 0))
    p.start()
    s = p.store
    items = [(i, "encoded", 1000 + s.overhead, b"x" * 1000) for i in range(40)]
    assert s.admit("a", items) == [1] * 40
    pinned = s.lookup("a", [0, 1, 2])  # a fetch in flight
    _put(p, (0, 0, 100), version=4)
    p.tick(force=True)
    assert s.usage()["encoded"] == 3 * (1000 + s.overhead)  # only the pinned three are left
    assert s.cached("encoded", [0, 1, 2, 3]) == [True, True, True, False]
    s.release("a", pinned)
    time.sleep(0.01)
    p.tick(force=True)
    assert s.usage()["encoded"] == 0


def test_jobs_that_start_together_replace_the_first_jobs_plan_at_once(redis_proc, monkeypatch):
    # the first loader planned for itself alone; the jobs started with it join seconds later,
    # when its first values made a tier warm: the young plan from defaults follows them at once
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 30.0)
    p = _planner(redis_proc.client, measured=False)
    first = p.start()
    assert first.inputs["cluster.jobs"] == 1 and first.split.percent[2] == 0
    s = p.store
    value = b"x" * 100_000
    items = [(i, "decoded", s.charge(len(value)), value) for i in range(50)]
    assert s.admit("a", items) == [1] * 50  # warm
    for name in ("b", "c"):
        s.join(name)
    p.tick(force=True)
    now = _stored(p)
    assert now.split == plan_for(spec_of(p.setting, {}, 3)).split != first.split
    assert now.source == "defaults" and now.version == 2 and now.inputs["cluster.jobs"] == 3


def test_a_lone_job_never_keeps_a_split_it_cannot_read(redis_proc, monkeypatch):
    """Two jobs planned all augmented (a slow cache measured); the next job, alone, reads no
    crop another job made: at its first look it plans the tiers it reads, though the plan is
    measured and young, the jobs not settled, and the augmented tier warm."""
    monkeypatch.setattr(defaults, "AUTO_JOBS_SETTLE", 600.0)
    p = _planner(redis_proc.client)
    _put(p, (0, 0, 100), age_s=1, jobs=2)
    p.start()
    s = p.store
    value = b"x" * 100_000  # crops the two jobs left: 10% of the cache, warm
    items = [(i, "augmented", s.charge(len(value)), value) for i in range(50)]
    assert s.admit("a", items) == [1] * 50
    p.tick(force=True)
    stored = _stored(p)
    assert stored.split.percent[2] == 0 and stored.version == 4, stored.describe()
    assert p.split == stored.as_split() and p.store.capacity["augmented"] == 0
    assert (
        stored.split
        == plan_for(
            spec_of(p.setting, measured_inputs(MEASURED, 1, 1), 1),
            (
                "encoded",
                "decoded",
            ),
        ).split
    )


def test_a_plan_from_a_short_slow_measurement_does_not_stick(redis_proc):
    """Two jobs; the first measured plan came from 556 samples that read the cache at 0.16
    Gbit/s (a slow start): all decoded. The cache is fast after all: once this loader has
    measured twice the samples, it looks again (the plan a second old) and plans all
    augmented; not before."""
    p = _planner(redis_proc.client, measured=False, others=("b",))
    slow = {**MEASURED, "ns_cache": 100 * MEASURED["ns_cache"]}
    p.counters.add(0, slow)
    p.tick(force=True)
    first = _stored(p)
    assert (
        first.source == "measured" and first.evidence == 556 and first.split.percent == (0, 100, 0)
    )
    fast = {k: int(v * 0.8) for k, v in MEASURED.items()}  # 444 more samples, 204 hits ...
    fast.update(bytes_cache=100 * 10**6, ns_cache=100 * 10**6)  # ... of 100 MB in 0.1 s
    p.counters.add(0, fast)
    p.tick(force=True)  # the cache reads faster now, but 1,000 samples are not twice 556
    assert _stored(p) == first
    p.counters.add(0, {"samples": 112})
    p.tick(force=True)
    again = _stored(p)
    assert again.version == first.version + 1 and again.split.percent == (0, 0, 100), again
    assert again.evidence == 1112 and again.previous == first.split and again.gain > 0.1
    p.tick(force=True)  # planned from 1,112 samples a moment ago: stands
    assert _stored(p) == again


def test_a_longer_measurement_that_agrees_keeps_the_split_and_says_so(redis_proc):
    p = _planner(redis_proc.client, others=("b",))
    _put(
        p,
        plan_for(spec_of(p.setting, measured_inputs(MEASURED, 2, 1), 2)).split,
        jobs=2,
        evidence=200,
    )
    p.start()
    p.tick(force=True)
    kept = _stored(p)
    assert kept.version == 3 and kept.evidence == 556 and kept.by == "a"
    assert "node.decode_augment_samples_per_s" in kept.measured
