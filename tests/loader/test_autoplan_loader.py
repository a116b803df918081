"""SenecaLoader plans its own split by default: the plan is in the cache, workers follow the
plan the cache holds, and the options that fix a split turn it off; on a real redis-server."""

import pytest
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from ods.store import OdsStore
from seneca import SenecaLoader
from seneca._autoplan import PlanRecord
from seneca_base.errors import ConfigError
from seneca_base.split import Split

RANDOM = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])


def _record(loader):
    store = loader.store
    return PlanRecord.from_json(store.client.get(store.keys.plan))


def test_a_loader_given_nothing_else_plans_its_split_and_stores_it(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    loader = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="4MB")
    record = _record(loader)
    assert loader.planner is not None and record is not None and record.version == 1
    assert loader.split == record.as_split().fractions
    assert loader.store.capacity == record.as_split().budgets(4_000_000)
    other = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="4MB")
    assert _record(other) == record and other.split == loader.split  # one plan per dataset
    fixed = SenecaLoader(ds, batch_size=8, cache=redis_url, split=(0.5, 0.3, 0.2))
    assert fixed.planner is None and fixed.split["decoded"] == 0.3


def test_workers_follow_the_plan_the_cache_holds(tiny_dataset, redis_url):
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="4MB", num_workers=1
    )
    store = loader.store
    encoded_only = PlanRecord(
        Split.from_percent((100, 0, 0)), 6, "measured", 1.0, at_ms=store.now_ms()
    )
    store.client.set(store.keys.plan, encoded_only.to_json())
    loader.planner.tick(force=True)  # the loader process adopts it (and looks again in 2 s)
    assert store.capacity["encoded"] == 4_000_000 and store.capacity["decoded"] == 0
    decoded_only = PlanRecord(
        Split.from_percent((0, 100, 0)), 7, "measured", 1.0, at_ms=store.now_ms()
    )
    store.client.set(store.keys.plan, decoded_only.to_json())  # another job's new plan ...
    other = OdsStore(store.client, store.keys.dataset, 48, view=store.keys.view)
    other.apply_split(decoded_only.as_split(), 4_000_000)
    other.publish_budgets("other")  # ... and the budgets it puts in force
    assert len(list(loader)) == 6
    stats = loader.stats()
    # the worker started with the encoded-only budgets and follows the plan it reads
    assert stats["decoded"]["admitted"] > 0 and stats["encoded"]["admitted"] == 0
    loader.planner.tick(force=True)
    assert loader.split == {"encoded": 0.0, "decoded": 1.0, "augmented": 0.0}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"split": "fast"}, "split: expected 'auto'"),
        ({"split": (0.5, 0.3, 0.2), "spec": "inhouse"}, "spec= is what split='auto' plans"),
        ({"spec": "missing.toml"}, "missing.toml"),
    ],
)
def test_bad_plan_options_name_the_option(tiny_dataset, redis_url, options, message):
    ds = ImageFolder(str(tiny_dataset), transform=RANDOM)
    with pytest.raises(ConfigError, match=message):
        SenecaLoader(ds, batch_size=8, cache=redis_url, **options)
