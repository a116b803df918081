"""A TLS cache node: a certificate that fails verification is a configuration error when the
loader is made; with the node's CA the loader trains through TLS."""

import shutil

import pytest
from conftest import RedisProcess
from helpers.indexed import indexed
from helpers.tls import self_signed

from seneca import ConfigError, SenecaLoader

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture
def tls_node(tmp_path, free_port):
    cert, key = self_signed(tmp_path)
    args = ["--tls-port", str(free_port), "--tls-cert-file", str(cert)]
    args += ["--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)]
    server = RedisProcess(*args, "--tls-auth-clients", "no")
    yield f"rediss://127.0.0.1:{free_port}", cert
    server.stop()


def test_a_certificate_that_fails_verification_is_a_config_error(tiny_dataset, tls_node):
    url, _ = tls_node
    with pytest.raises(ConfigError, match="TLS verification"):
        SenecaLoader(indexed(tiny_dataset), batch_size=8, shuffle=True, cache=url)


def test_the_nodes_ca_makes_the_loader_train_through_tls(tiny_dataset, tls_node):
    url, cert = tls_node
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=f"{url}?ssl_ca_certs={cert}"
    )
    assert sorted(int(y) for _, ys in loader for y in ys) == list(range(48))
    loader.reset_stats()
    assert sorted(int(y) for _, ys in loader for y in ys) == list(range(48))
    assert loader.stats()["storage_reads"] == 0  # the second epoch read the cache
