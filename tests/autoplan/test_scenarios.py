"""Two runs that made the shared plan flap and empty warm tiers, replayed on a cache node: the
plan settles, gives no share to a tier nobody reads, and no warm tier is emptied."""

import itertools
import time

import pytest
from conftest import RedisProcess
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader, defaults
from seneca._bench.synthetic import make_dataset


@pytest.fixture(scope="module")
def three_hundred(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenarios") / "data"
    make_dataset(root, 300, 3, size=(64, 48), progress=False, workers=2)
    return root


@pytest.fixture
def node():
    server = RedisProcess("--maxmemory", "200mb", "--maxmemory-policy", "noeviction")
    yield server
    server.stop()


class Watch:
    """The tiers' usage and the plan after every batch of a run."""

    def __init__(self, store):
        self.store, self.used, self.plans = store, [], set()

    def look(self, planner):
        self.used.append(self.store.usage())
        self.plans.add((planner.record.version, planner.record.split))

    def emptied(self):
        """The tiers that held values and later held none."""
        out = set()
        for tier in self.used[0]:
            held = [u[tier] for u in self.used]
            first = next((k for k, v in enumerate(held) if v > 0), None)
            if first is not None and min(held[first:]) == 0:
                out.add(tier)
        return out


def _loader(root, url, transform, job):
    return SenecaLoader(
        ImageFolder(str(root), transform=transform),
        batch_size=16,
        shuffle=True,
        cache=url,
        job=job,
    )


def test_a_lone_job_then_another_on_the_same_node(three_hundred, node, monkeypatch):
    # one job, 2 epochs, a transform that ends in a deterministic resize and has no cache
    # boundary; then a second job on the same node: it must find what the first one cached
    monkeypatch.setattr(defaults, "AUTO_TICK", 0.05)
    transform = v2.Compose([v2.PILToTensor(), v2.Resize((32, 32))])
    first = _loader(three_hundred, node.url, transform, "first")
    watch = Watch(first.store)
    for _ in range(2):
        for _ in first:
            watch.look(first.planner)
    assert all(split.augmented == 0 for _, split in watch.plans)  # a lone job reads no crop
    assert watch.emptied() == set()
    first.close()
    second = _loader(three_hundred, node.url, transform, "second")
    rates = []
    for _ in range(2):
        second.reset_stats()
        assert sum(len(y) for _, y in second) == 300
        stats = second.stats()
        rates.append(sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded")) / 300)
    assert min(rates) >= 0.9, rates
    second.close()


@pytest.mark.slow
def test_two_jobs_with_slow_steps_keep_one_plan(three_hundred, node, monkeypatch):
    # steps longer than the lease now and then: the live jobs stay 2, the plan settles
    monkeypatch.setattr(defaults, "AUTO_TICK", 0.05)
    monkeypatch.setattr("ods.defaults.JOB_LEASE", 0.8)
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.PILToTensor()])
    a = _loader(three_hundred, node.url, transform, "a")
    b = _loader(three_hundred, node.url, transform, "b")
    watch = Watch(a.store)
    for _ in range(2):
        pairs = itertools.zip_longest(a, b)
        for k, _ in enumerate(pairs):
            watch.look(a.planner)
            if k % 6 == 5:
                time.sleep(1.2)  # a slow step: longer than the lease
    versions = {v for v, _ in watch.plans}
    assert len(versions) <= 4, watch.plans
    assert watch.emptied() == set()
    assert a.planner.record.inputs["cluster.jobs"] == 2
    a.close()
    b.close()


def test_jobs_that_start_together_decide_their_first_batch_under_a_plan_for_all(
    three_hundred, node
):
    # the first loader plans for itself alone (no crops: it never reads its own); the other
    # job is registered by the time the first one starts its epoch, which looks at the plan
    # before it decides anything: none of its samples is cached under the lone job's plan
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.PILToTensor()])
    a = _loader(three_hundred, node.url, transform, "a")
    first = a.planner.record
    assert first.inputs["cluster.jobs"] == 1 and first.split.percent[2] == 0
    b = _loader(three_hundred, node.url, transform, "b")
    next(iter(b))  # b joins and starts its epoch (it looks at the plan there too)
    next(iter(a))
    record = a.planner.record
    assert record.inputs["cluster.jobs"] == 2 and record.split.percent[2] > 0
    assert a.stats()["decoded"]["admitted"] == 0 and a.stats()["augmented"]["admitted"] > 0
