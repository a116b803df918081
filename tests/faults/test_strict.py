"""strict=True (or SENECA_STRICT=1): a cache that fails is an error, not a warning and reads
from storage."""

import pytest
from helpers.indexed import indexed

from seneca import SenecaLoader
from seneca_base.errors import CacheError, CacheUnavailableError, ConfigError


def test_an_unreachable_cache_is_an_error_when_strict(tiny_dataset, free_port, monkeypatch):
    url = f"redis://127.0.0.1:{free_port}"
    with pytest.raises(CacheUnavailableError, match=f"127.0.0.1:{free_port}"):
        SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=url, strict=True)
    monkeypatch.setenv("SENECA_STRICT", "1")
    with pytest.raises(CacheUnavailableError):
        SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=url)
    loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=url, strict=False)
    assert sum(len(y) for _, y in loader) == 48  # not strict: reads from storage


@pytest.mark.parametrize(("shuffle", "workers"), [(True, 0), (False, 0), (True, 2)])
def test_a_cache_lost_mid_epoch_is_an_error_when_strict(tiny_dataset, shuffle, workers):
    """With workers the error comes from a batch's late decision (or a worker's read)."""
    from conftest import RedisProcess

    server = RedisProcess()
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=4, shuffle=shuffle, cache=server.url, strict=True,
        num_workers=workers,
    )  # fmt: skip
    it = iter(loader)
    next(it)
    server.stop()
    with pytest.raises(CacheError):
        for _ in it:
            pass


def test_strict_takes_a_bool(tiny_dataset, redis_url):
    with pytest.raises(ConfigError, match="strict"):
        SenecaLoader(indexed(tiny_dataset), cache=redis_url, strict="yes")


def test_a_host_that_does_not_exist_is_a_configuration_error(tiny_dataset):
    # not an outage to train through uncached, strict or not: the URL is wrong
    url = "redis://no-such-cache-host.invalid:6379"
    with pytest.raises(ConfigError, match="no-such-cache-host.invalid' of redis://") as err:
        SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=url)
    assert "does not exist" in str(err.value)
