import pytest

from seneca import defaults
from seneca._cache.client import CacheClient, redact_url, validate_url
from seneca.loader._options import parse_split, resolve_job
from seneca_base.errors import ConfigError
from seneca_base.split import Split
from seneca_base.units import parse_size


def test_parse_size_units():
    assert parse_size("2GB", "x") == 2 * 10**9
    assert parse_size("512MiB", "x") == 512 * 2**20
    assert parse_size("1.5 kb", "x") == 1500
    assert parse_size(1000, "x") == 1000


@pytest.mark.parametrize("bad", ["", "-1GB", "0", "12 parsecs", "GB", True, None])
def test_parse_size_errors_name_the_option(bad):
    with pytest.raises(ConfigError, match="cache_size"):
        parse_size(bad, "cache_size")


def test_split_forms():
    assert parse_split((0.2, 0.3, 0.5)) == Split(0.2, 0.3, 0.5)
    assert parse_split({"decoded": 1}).fractions == {
        "encoded": 0.0,
        "decoded": 1.0,
        "augmented": 0.0,
    }
    assert parse_split(None) == Split.of(defaults.SPLIT)


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ((-0.1, 0.6, 0.5), "between 0 and 1"),
        ((0.5, 0.4, 0.0), "sum to 1"),
        ({"encoded": 0.5, "decodd": 0.5}, "unknown tier 'decodd'"),
        ((0.5, 0.5), "expected"),
        ("0.5,0.5,0", "expected"),
        ((float("nan"), 0.5, 0.5), "must be a number"),
    ],
)
def test_bad_split(split, message):
    with pytest.raises(ConfigError, match=f"split: .*{message}"):
        parse_split(split)


def test_job_names():
    assert resolve_job("train-a") == "train-a"
    assert resolve_job(None) != resolve_job(None)  # unique per loader
    with pytest.raises(ConfigError, match="job"):
        resolve_job("")


def test_urls_are_validated_and_redacted():
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert "s3cret" not in redact_url("redis://user:s3cret@host:1?password=s3cret")
    for bad in ("http://host:1", "redis://", "unix://", "redis://host:notaport", ""):
        with pytest.raises(ConfigError, match="cache"):
            validate_url(bad)
    with pytest.raises(ConfigError) as err:
        CacheClient("ftp://:s3cret@host")
    assert "s3cret" not in str(err.value)


def test_configuration_errors_of_the_cache_are_errors(tiny_dataset):
    """A wrong password, a missing one and an ACL user without Seneca's commands stop the
    loader's construction with the URL (password redacted); only an unreachable cache degrades."""
    from conftest import RedisProcess
    from torchvision.datasets import ImageFolder

    from seneca import SenecaLoader

    server = RedisProcess(password="right-one")
    try:
        ds = ImageFolder(str(tiny_dataset))
        base = f"unix://{server.sock}"
        with pytest.raises(ConfigError, match="refused the login") as err:
            SenecaLoader(ds, cache=f"{base}?password=wrong-one")
        assert "wrong-one" not in str(err.value)
        with pytest.raises(ConfigError, match="refused the login"):
            SenecaLoader(ds, cache=base)
        server.client.execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "+ping")
        names = r"denies a command Seneca needs: .*run the '\w+' command"  # which one
        with pytest.raises(ConfigError, match=names):
            SenecaLoader(ds, cache=f"unix://reader:pw@{server.sock}")
        assert SenecaLoader(ds, cache=server.url).store is not None
    finally:
        server.stop()
