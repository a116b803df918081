"""A single job on a cache node replaces the defaults' plan with a measured one in its first
epoch (once it has measured AUTO_WARMUP_SAMPLES samples), and logs it as `seneca cache status`
shows it."""

import logging

import pytest
from conftest import RedisProcess
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader, defaults
from seneca._autoplan.record import PlanRecord
from seneca._bench.synthetic import make_dataset


@pytest.fixture(scope="module")
def three_hundred(tmp_path_factory):
    root = tmp_path_factory.mktemp("three-hundred") / "data"
    make_dataset(root, 300, 3, size=(64, 48), progress=False, workers=2)
    return root


def test_a_single_job_reaches_a_measured_plan(three_hundred, monkeypatch, caplog):
    monkeypatch.setattr(defaults, "AUTO_TICK", 0.05)  # looks often: the epoch is short
    node = RedisProcess("--maxmemory", "200mb", "--maxmemory-policy", "noeviction")
    transform = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
    try:
        with caplog.at_level(logging.INFO, logger="seneca"):
            loader = SenecaLoader(
                ImageFolder(str(three_hundred), transform=transform),
                batch_size=16,
                shuffle=True,
                cache=node.url,
                num_workers=1,
            )
            assert sum(len(y) for _, y in loader) == 300
        stored = PlanRecord.from_json(node.client.get(loader.store.keys.plan))
        loader.close()
    finally:
        node.stop()
    assert stored.source == "measured" and loader.planner.record == stored
    assert "node.decode_augment_samples_per_s" in stored.measured
    assert f"cache plan for ImageFolder {three_hundred}: {stored.describe()}" in caplog.messages
