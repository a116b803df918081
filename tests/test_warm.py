"""helpers.warm, the fork server the tests' jobs start from: a job it forks behaves as the same
command in a fresh interpreter would, in what the tests' jobs rely on."""

import os
import signal
import subprocess
import sys

from helpers import warm
from helpers.waiting import wait_for

PY = sys.executable


def test_a_job_gets_its_arguments_environment_directory_and_path(tmp_path):
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "warm_probe.py").write_text("NAME = 'probe'\n")
    code = (
        "import json, os, sys, warm_probe;"
        "print(json.dumps([sys.argv, os.environ['WARM_X'], os.getcwd(), warm_probe.NAME,"
        " 'seneca' in sys.modules, sys.path[0]]))"
    )
    env = {**os.environ, "WARM_X": "x", "PYTHONPATH": str(tmp_path / "extra")}
    done = warm.run(
        [PY, "-c", code, "a", "b"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f'[["-c", "a", "b"], "x", "{tmp_path}", "probe", false, ""]')


def test_a_script_and_a_module_run_as_main(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import sys\nif __name__ == '__main__':\n    print(sys.argv[1:])\n")
    done = warm.run([PY, str(script), "1"], capture_output=True, text=True, check=True)
    assert done.stdout == "['1']\n"
    done = warm.run([PY, "-m", "seneca", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("seneca ")


def test_exit_status_as_subprocess_reports_it():
    assert warm.run([PY, "-c", "import sys; sys.exit(3)"]).returncode == 3
    failed = warm.run([PY, "-c", "1/0"], capture_output=True, text=True)
    assert failed.returncode == 1 and "ZeroDivisionError" in failed.stderr
    interrupted = warm.run([PY, "-c", "raise KeyboardInterrupt"], capture_output=True)
    assert interrupted.returncode == -signal.SIGINT
    job = warm.popen(
        [PY, "-c", "print('up', flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert job.stdout.readline() == "up\n" and job.poll() is None
    os.kill(job.pid, signal.SIGKILL)  # its pid is the job's own
    assert job.wait(timeout=60) == -signal.SIGKILL
    job.stdin.close()
    job.stdout.close()


def test_the_exit_joins_threads_then_runs_exit_handlers_and_collects():
    code = """
import atexit, sys, threading, time
class Held:
    def __del__(self):
        print("collected", flush=True)
held = Held()
atexit.register(print, "atexit", flush=True)
threading.Thread(target=lambda: (time.sleep(0.2), print("thread", flush=True))).start()
"""
    done = warm.run([PY, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["thread", "atexit", "collected"], done.stdout


def test_each_job_draws_its_own_random_numbers():
    code = (
        "import random, numpy, torch\nprint(random.random(), numpy.random.rand(), torch.rand(1)[0])"
    )
    one, two = (warm.run([PY, "-c", code], capture_output=True, text=True).stdout for _ in "ab")
    drawn = [a != b for a, b in zip(one.split(), two.split(), strict=True)]
    assert drawn == [True, True, True], (one, two)


def test_stdin_and_stderr_into_stdout():
    done = warm.run(
        [PY, "-c", "import sys; print(sys.stdin.read().upper()); print('e', file=sys.stderr)"],
        input="abc",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert done.stdout.split() == ["ABC", "e"] and done.stderr is None


def test_a_command_it_does_not_fork_runs_as_a_real_process():
    job = warm.popen([PY, "-I", "-c", "print(1)"], stdout=subprocess.PIPE)
    assert isinstance(job, subprocess.Popen)  # an interpreter option
    assert job.communicate(timeout=60)[0] == b"1\n"
    seeded = {**os.environ, "PYTHONHASHSEED": "7"}  # the server's hash seed is its own
    job = warm.popen([PY, "-c", "print(hash('a'))"], env=seeded, stdout=subprocess.PIPE)
    assert isinstance(job, subprocess.Popen)
    job.communicate(timeout=60)


def test_a_launcher_runs_a_script_as_a_job_in_its_place(tmp_path):
    """``warm.py --exec SCRIPT ...`` (torchrun's command for a rank): the script runs as a job
    with the launcher's streams and environment, a signal sent to the launcher reaches it, and
    its exit status is the launcher's."""
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys, time\n"
        "print(sys.argv[1:], os.environ['WARM_X'], 'torch' in sys.modules, flush=True)\n"
        "print(os.getpid(), flush=True)\n"
        "if sys.argv[1] == 'wait':\n"
        "    time.sleep(600)\n"
        "sys.exit(5)\n"
    )
    launcher = [PY, warm.__file__, "--exec", str(script)]
    env = {**os.environ, "WARM_X": "x"}
    warm.run([PY, "-c", "pass"], check=True)  # (this process's server: the launcher's too)
    done = subprocess.run([*launcher, "a"], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.splitlines()[0]) == (5, "['a'] x True"), done.stderr
    job = subprocess.Popen([*launcher, "wait"], env=env, stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline() == "['wait'] x True\n"
    pid = int(job.stdout.readline())  # the job's own: not the launcher's
    assert pid != job.pid
    job.terminate()
    assert job.wait(timeout=60) == -signal.SIGTERM
    job.stdout.close()
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), f"the job (pid {pid}) to end")
