"""A cache node with the ACL users the deployment files create (the same config text as
``seneca cache-node``): the ``loader`` user trains with every cache feature, and may not touch
other keys or the server; the ``admin`` user runs the operator commands."""

import hashlib
import shutil
import subprocess
import sys
import time

import pytest
import redis
from conftest import REDIS_SERVER, once, wait_for_ping
from helpers.indexed import indexed
from helpers.tls import self_signed

from seneca import ConfigError, SenecaLoader
from seneca._cache.server import LOADER_REFUSED, redis_config
from seneca._cli.main import main


@pytest.fixture
def acl_node(tmp_path, free_port):
    conf = tmp_path / "redis.conf"
    users = {"admin": "admin-secret", "loader": "loader-secret"}
    conf.write_text(redis_config(maxmemory=200_000_000, port=free_port, users=users))
    proc = subprocess.Popen([REDIS_SERVER, str(conf)], stdout=subprocess.DEVNULL)
    url = f"redis://{{}}@127.0.0.1:{free_port}"
    admin = redis.Redis(port=free_port, username="admin", password="admin-secret")
    wait_for_ping(admin, proc)
    yield url.format("loader:loader-secret"), url.format("admin:admin-secret"), admin
    proc.terminate()
    proc.wait(timeout=60)


def test_the_loader_user_trains_and_the_admin_user_operates(tiny_dataset, acl_node, capsys):
    loader_url, admin_url, _ = acl_node
    common = dict(batch_size=8, shuffle=True, cache=loader_url, cache_size="20MB")
    a, b = (SenecaLoader(indexed(tiny_dataset), split=(0.5, 0.25, 0.25), **common) for _ in "ab")
    for _ in range(2):
        for _ in zip(a, b, strict=True):
            pass
    stats = a.stats()
    assert stats["cache_errors"] == 0 and stats["augmented"]["hits"] > 0
    assert stats["samples"] == 96 and stats["encoded"]["hits"] + stats["decoded"]["hits"] > 0
    assert main(["cache", "status", admin_url, "--json"]) == 0
    assert '"live_jobs": 2' in capsys.readouterr().out
    assert main(["cache", "status", loader_url]) == 0  # reading is allowed to the loader too
    a.close()
    b.close()
    assert main(["cache", "gc", admin_url, "--apply"]) == 0


#: an example of each command the loader may not run
REFUSED = {
    "KEYS": ("KEYS", "*"), "CONFIG": ("CONFIG", "GET", "maxmemory"), "FLUSHALL": ("FLUSHALL",),
    "FLUSHDB": ("FLUSHDB",), "SCRIPT": ("SCRIPT", "FLUSH"), "EVAL": ("EVAL", "return 1", "0"),
    "MODULE": ("MODULE", "LIST"), "ACL": ("ACL", "LIST"), "SAVE": ("SAVE",),
    "BGSAVE": ("BGSAVE",), "DEBUG": ("DEBUG", "SLEEP", "0"), "SHUTDOWN": ("SHUTDOWN", "NOSAVE"),
    "FUNCTION FLUSH": ("FUNCTION", "FLUSH"), "FUNCTION DELETE": ("FUNCTION", "DELETE", "x"),
    "CLIENT KILL": ("CLIENT", "KILL", "ID", "1"),
}  # fmt: skip
#: the refusal: by the ACL, or (DEBUG) by the server's own setting
DENIED = "no permissions|DEBUG command not allowed"


def test_the_loader_user_may_touch_only_senecas_keys(acl_node):
    loader_url, _, admin = acl_node
    admin.set("other", b"x")
    r = redis.Redis.from_url(loader_url)
    r.set("seneca:probe", b"1")
    assert set(REFUSED) == set(LOADER_REFUSED)
    for command in [("GET", "other"), *REFUSED.values()]:
        with pytest.raises(redis.ResponseError, match=DENIED):
            r.execute_command(*command)
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.eval("return redis.call('GET', KEYS[1])", 1, "other")
    assert admin.get("other") == b"x" and admin.ping()


@pytest.mark.slow
def test_a_password_file_starts_a_least_privilege_node(tmp_path, free_port, tiny_dataset):
    """``seneca cache-node --password-file`` (as the README shows): the loader's login is the
    ``loader`` user, refused every command of LOADER_REFUSED; an ``admin`` user gets a
    generated password (kept for the next start); the default user is off."""
    pw = tmp_path / "pw.txt"
    pw.write_text("loader-secret\n")
    node = _cache_node("--port", str(free_port), "--password-file", str(pw))
    try:
        admin_pw = tmp_path / "pw.txt.admin"
        for _ in range(100):
            if admin_pw.exists() and admin_pw.read_text().strip():
                break
            time.sleep(0.05)
        assert admin_pw.stat().st_mode & 0o777 == 0o600
        secret = admin_pw.read_text().strip()
        admin = redis.Redis(port=free_port, username="admin", password=secret)
        wait_for_ping(admin, node)
        url = f"redis://loader:loader-secret@127.0.0.1:{free_port}"
        loader = redis.Redis.from_url(url)
        for name, command in REFUSED.items():
            with pytest.raises(redis.ResponseError, match=DENIED):
                loader.execute_command(*command)
            assert admin.ping(), name
        with pytest.raises(redis.AuthenticationError):
            once(redis.Redis(port=free_port, password="loader-secret")).ping()  # the default user
        with pytest.raises(redis.AuthenticationError):  # a login is needed
            once(redis.Redis(port=free_port)).set("seneca:x", b"1")
        job = SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=url, cache_size="20MB")
        assert sum(len(y) for _, y in job) == 48 and job.stats()["cache_errors"] == 0
        job.close()
        assert main(["cache", "gc", f"redis://admin:{secret}@127.0.0.1:{free_port}"]) == 0
    finally:
        node.terminate()
        node.wait(timeout=60)
    _cache_node("--port", str(free_port), "--password-file", str(pw), "--write-config",
                str(tmp_path / "again.conf")).wait(timeout=60)  # fmt: skip
    assert admin_pw.read_text().strip() == secret  # kept, not generated again


def test_a_wrong_password_is_a_config_error_naming_the_url(tiny_dataset, acl_node):
    loader_url, _, _ = acl_node
    bad = loader_url.replace("loader-secret", "wrong")
    with pytest.raises(ConfigError, match="refused the login") as err:
        SenecaLoader(indexed(tiny_dataset), batch_size=8, shuffle=True, cache=bad)
    assert "wrong" not in str(err.value)


def test_a_url_without_a_login_says_which_login_the_node_wants(tiny_dataset, acl_node):
    loader_url, _, _ = acl_node
    bare = loader_url.replace("loader:loader-secret@", "")
    with pytest.raises(ConfigError, match="refused the login") as err:
        SenecaLoader(indexed(tiny_dataset), batch_size=8, shuffle=True, cache=bare)
    assert "the node asks for a login" in str(err.value)
    assert "redis://loader:PASSWORD@host:port" in str(err.value)


def _cache_node(*args):
    cmd = [sys.executable, "-m", "seneca._cli.main", "cache-node", "--maxmemory", "64MB", *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.slow
def test_cache_node_serves_tls_with_acl_users(tmp_path, free_port):
    cert, key = self_signed(tmp_path)
    (tmp_path / "loader").write_text("loader-pw\n")
    (tmp_path / "admin").write_text("admin-pw\n")
    node = _cache_node(
        "--port", str(free_port), "--tls-cert", str(cert), "--tls-key", str(key),
        "--loader-password-file", str(tmp_path / "loader"),
        "--admin-password-file", str(tmp_path / "admin"),
    )  # fmt: skip
    try:
        url = f"rediss://{{}}@127.0.0.1:{free_port}?ssl_ca_certs={cert}"
        admin = redis.Redis.from_url(url.format("admin:admin-pw"), socket_connect_timeout=0.2)
        wait_for_ping(admin, node)
        assert admin.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        loader = redis.Redis.from_url(url.format("loader:loader-pw"))
        assert loader.ping() and loader.set("seneca:x", b"1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            loader.flushall()
        with pytest.raises(redis.ConnectionError):  # no plain-text port
            once(redis.Redis(port=free_port, socket_connect_timeout=0.5)).ping()
    finally:
        node.terminate()
        node.wait(timeout=60)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--admin-password-file", "x"], "needs --password-file"),
        (["--password-file", "x", "--loader-password-file", "x"], "not both"),
        (["--password-file", "/nonexistent"], "--password-file: cannot read /nonexistent"),
        (["--tls-cert", "x"], "--tls-key: give both"),
        (["--tls-cert", "/nonexistent", "--tls-key", "/nonexistent"], "--tls-cert: cannot read"),
    ],
)
def test_cache_node_option_errors(args, message):
    node = _cache_node(*args)
    _, err = node.communicate(timeout=60)
    assert node.returncode == 2 and message in err


def test_a_written_config_holds_passwords_only_as_hashes(tmp_path):
    (tmp_path / "pw").write_text("plain-secret\n")
    (tmp_path / "admin").write_text("a\n")
    for name, args in (
        ("generated.conf", ["--password-file", str(tmp_path / "pw")]),
        ("given.conf", ["--password-file", str(tmp_path / "pw"),
                        "--admin-password-file", str(tmp_path / "admin")]),
    ):  # fmt: skip
        assert main(["cache-node", "--maxmemory", "1MB", *args, "--write-config",
                     str(tmp_path / name)]) == 0  # fmt: skip
        text = (tmp_path / name).read_text()
        assert "plain-secret" not in text and "user default off" in text
        assert "#" + hashlib.sha256(b"plain-secret").hexdigest() in text
    assert "#" + hashlib.sha256(b"a").hexdigest() in (tmp_path / "given.conf").read_text()
