"""The deployment files: every compose file follows the compose spec, and the topologies they
describe run natively with the same scripts and configuration (one node with ACL users and TLS;
a 3-node cluster), each with the example training job."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REDIS_SERVER, cluster_ports
from helpers import warm
from helpers.tls import self_signed

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("name", ["compose.yaml", "compose.tls.yaml"])
def test_compose_files_follow_the_compose_spec(name):
    check = BIN / "check-jsonschema"
    done = subprocess.run(
        [str(check), "--builtin-schema", "vendor.compose-spec", str(DEPLOY / name)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_files_name_files_that_exist():
    text = (DEPLOY / "compose.yaml").read_text()
    for path in ("cache/write-config.sh", "cache/form-cluster.sh", "trainer/train.py"):
        assert path in text and (DEPLOY / path).is_file()
    assert (DEPLOY / "trainer" / "Dockerfile").is_file()


@pytest.fixture
def secrets(tmp_path):
    d = tmp_path / "secrets"
    d.mkdir()
    (d / "loader_password").write_text("loader-pw\n")
    (d / "admin_password").write_text("admin-pw\n")
    return d


def _env(**extra):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _script(name, *args, **env):
    done = subprocess.run(
        ["sh", str(DEPLOY / "cache" / name), *args], env=_env(**env), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _train(url, secrets, data):
    done = warm.run(
        [sys.executable, str(DEPLOY / "trainer" / "train.py")],
        env=_env(
            SENECA_CACHE_URL=url,
            SENECA_PASSWORD_FILE=secrets / "loader_password",
            SENECA_DATA=data,
            SENECA_IMAGES=64,
        ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _start(conf, cwd):
    return subprocess.Popen([REDIS_SERVER, str(conf)], cwd=cwd, stdout=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_one_node_with_acl_and_tls_trains(tmp_path, secrets, free_port):
    cert, key = self_signed(tmp_path)
    config = tmp_path / "config"
    _script(
        "write-config.sh",
        SECRETS_DIR=secrets, CONFIG_DIR=config, CACHE_MAXMEMORY="64MB", CACHE_PORT=free_port,
        CACHE_BIND="127.0.0.1", TLS_CERT=cert, TLS_KEY=key, TLS_CA=cert,
    )  # fmt: skip
    node = _start(config / "node.conf", tmp_path)
    try:
        url = f"rediss://loader:{{password}}@127.0.0.1:{free_port}?ssl_ca_certs={cert}"
        out = _train(url, secrets, tmp_path / "data")
        assert "epoch 1: 64 samples" in out and "cache errors 0" in out
    finally:
        node.terminate()
        node.wait(timeout=60)


@pytest.mark.slow
def test_a_three_node_cluster_trains(tmp_path, secrets):
    ports = cluster_ports(3)
    nodes = []
    try:
        for port in ports:
            d = tmp_path / str(port)
            _script(
                "write-config.sh",
                SECRETS_DIR=secrets, CONFIG_DIR=d, CACHE_MAXMEMORY="64MB", CACHE_PORT=port,
                CACHE_BIND="127.0.0.1",
            )  # fmt: skip
            nodes.append(_start(d / "cluster.conf", d))
        addresses = [f"127.0.0.1:{p}" for p in ports]
        _script("form-cluster.sh", *addresses, SECRETS_DIR=secrets)
        assert "formed already" in _script("form-cluster.sh", *addresses, SECRETS_DIR=secrets)
        out = _train(f"redis://loader:{{password}}@127.0.0.1:{ports[1]}", secrets, tmp_path / "d")
        assert "epoch 1: 64 samples" in out and "cache errors 0" in out
    finally:
        for node in nodes:
            node.terminate()
            node.wait(timeout=60)


def test_a_missing_secret_is_an_error_naming_it(tmp_path):
    (tmp_path / "admin_password").write_text("admin-pw\n")
    done = subprocess.run(
        ["sh", str(DEPLOY / "cache" / "write-config.sh")],
        env=_env(SECRETS_DIR=tmp_path, CONFIG_DIR=tmp_path / "config"),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "--loader-password-file" in done.stderr and "loader_password" in done.stderr
    assert not (tmp_path / "config" / "node.conf").exists()
