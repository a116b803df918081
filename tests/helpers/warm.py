"""Jobs run as scripts, started from a process that imported torch once: a fork server.

A fresh interpreter spends about 4 s of CPU importing torch and torchvision before a job's
first line; the suite runs dozens of jobs, so that import was a third of its CPU. ``popen``
starts the same job (``python -c CODE``, ``python SCRIPT`` or ``python -m MODULE``, with its
arguments, environment, directory and standard streams) as a fork of a server that imported
torch, torchvision, numpy and PIL and nothing else: seneca and the job's own modules are
imported by the job, as in a fresh interpreter. What the job gets is a new process as a fresh
interpreter would be, but for those imports: its own pid, environment and ``sys.path`` (from
the ``PYTHONPATH`` it is given), the random generators of Python, numpy and torch seeded anew,
its exit run as the interpreter's (non-daemon threads joined, ``atexit``, its objects
collected), and an exit status as ``subprocess`` reports it (negative: the signal that ended
it).

The object ``popen`` returns answers as much of ``subprocess.Popen`` as the tests use
(``pid``, ``poll``, ``wait``, ``communicate``, ``send_signal``, ``terminate``, ``kill``,
``stdin``, ``stdout``, ``stderr``, ``returncode``, ``args``; a ``with`` block); ``run`` is
``subprocess.run`` over it. A command it does not start this way (another executable,
interpreter options, a ``PYTHONHASHSEED`` of its own: the server's hash seed is the jobs')
runs as ``subprocess.Popen``.

A pytest process starts its server on first use and ends it when it exits; under pytest-xdist
the controller starts one for the run (:func:`share`) and its workers fork their jobs there
(one import of torch for the run, not one per worker). Run as a script, this module is the
server.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["fresh", "popen", "run"]

_HEADER = struct.Struct("!I")
_kept: list[object] = []
_PIPE, _DEVNULL, _STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT


# ----------------------------------------------------------------------------- the test's side


#: the environment variable that hands a run's shared server ("PID:PATH") to its workers
_SHARED = "SENECA_TEST_FORK_SERVER"
#: how long a worker waits for the shared server to come up (it imports torch: seconds)
_START_S = 300.0


class _Server:
    """The fork server of this process: its socket, and the pipe whose end tells it to go."""

    def __init__(self, *, wait: bool = True) -> None:
        self.dir = tempfile.mkdtemp(prefix="sn-warm-")
        self.path = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(self.stop)
        if wait:
            line = self.proc.stdout.readline()
            if line.strip() != "ready":
                self.proc.kill()
                raise RuntimeError(f"the fork server did not start: {line!r}")

    def hand_down(self) -> None:
        """Name this server to the processes started from here on (their environment)."""
        os.environ[_SHARED] = f"{self.proc.pid}:{self.path}"

    def stop(self) -> None:
        self.proc.stdin.close()  # the server's end of stdin reads EOF and it exits
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        with contextlib.suppress(OSError):  # (the server removes its socket as it exits)
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


_server: _Server | None = None
_server_lock = threading.Lock()


def share() -> None:
    """Start this process's server now, without waiting for it, and hand it to the processes
    started from here on (pytest-xdist's workers) through the environment."""
    global _server
    with _server_lock:
        if _server is None:
            _server = _Server(wait=False)
            _server.hand_down()


def _connect() -> socket.socket:
    """A connection to this process's server, or to the run's shared one (waited for while it
    comes up), the server started here on first use when there is neither."""
    global _server
    with _server_lock:
        shared = os.environ.get(_SHARED) if _server is None else None
        if shared is None and _server is None:
            _server = _Server()
            _server.hand_down()  # (a launcher started from here finds it too: see _exec)
    if shared is None:
        pid, path = None, _server.path
    else:
        owner, path = shared.split(":", 1)
        pid = int(owner)
    deadline = time.monotonic() + _START_S
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if pid is None:
                raise
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                raise RuntimeError(f"the run's fork server (pid {pid}) is gone") from None
            if time.monotonic() > deadline:
                waited = f"did not listen at {path} in {_START_S:.0f} s"
                raise RuntimeError(f"the run's fork server (pid {pid}) {waited}") from None
            time.sleep(0.05)


def _job(args: list[str]) -> tuple[str, str, list[str]] | None:
    """(kind, target, arguments) of ``python ...`` as the server runs it, or None."""
    if len(args) < 2 or args[0] != sys.executable:
        return None
    first = args[1]
    if first in ("-c", "-m") and len(args) >= 3:
        return first, args[2], list(args[3:])
    if first.startswith("-"):
        return None  # an interpreter option: a real interpreter
    return "script", first, list(args[2:])


class WarmProcess:
    """A job forked by the server, as ``subprocess.Popen`` shows a child."""

    def __init__(
        self,
        args: list[str],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        errors: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        start_new_session: bool = False,
    ) -> None:
        kind, target, rest = _job(args)
        text = text or errors is not None
        self.args = args
        self.returncode: int | None = None
        self.stdin: IO | None = None
        self.stdout: IO | None = None
        self.stderr: IO | None = None
        ours: list[int] = []  # our ends of the pipes made here
        theirs: list[int] = []  # the job's standard streams, closed here once sent
        passed: list[int] = []
        for i, want in enumerate((stdin, stdout, stderr)):
            if want is None:
                passed.append(i)
            elif want == _DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                theirs.append(fd)
                passed.append(fd)
            elif want == _STDOUT and i == 2:
                passed.append(passed[1])
            elif want == _PIPE:
                r, w = os.pipe()
                mine, job = (w, r) if i == 0 else (r, w)
                ours.append(mine)
                theirs.append(job)
                passed.append(job)
                stream = open(mine, "wb" if i == 0 else "rb")  # noqa: SIM115  (the caller closes it)
                if text:
                    stream = io.TextIOWrapper(stream, errors=errors, write_through=i == 0)
                setattr(self, ("stdin", "stdout", "stderr")[i], stream)
            else:
                passed.append(want if isinstance(want, int) else want.fileno())
        request = {
            "kind": kind,
            "target": target,
            "args": rest,
            "env": dict(os.environ if env is None else env),
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "new_session": start_new_session,
        }
        body = json.dumps(request).encode()
        try:
            self._conn = _connect()
            socket.send_fds(self._conn, [_HEADER.pack(len(body)) + body], passed)
        finally:
            for fd in theirs:
                os.close(fd)
        self._answers = self._conn.makefile("r")
        self.pid = int(self._answers.readline())
        self._readers: dict[str, threading.Thread] = {}
        self._read: dict[str, list] = {}

    # -- the exit status

    def _take_status(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready = selectors.DefaultSelector()
        ready.register(self._conn, selectors.EVENT_READ)
        try:
            if not ready.select(timeout):
                return False
        finally:
            ready.close()
        line = self._answers.readline()
        self.returncode = int(line)
        self._answers.close()
        self._conn.close()
        return True

    def poll(self) -> int | None:
        self._take_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._take_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    # -- signals

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    # -- the pipes

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple:
        """As ``Popen.communicate``: write ``input``, read the pipes to their end and wait; a
        call cut by ``timeout`` may be made again."""
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and name not in self._readers:
                self._read[name] = []
                reader = threading.Thread(
                    target=lambda s=stream, into=self._read[name]: into.append(s.read()),
                    daemon=True,
                )
                reader.start()
                self._readers[name] = reader
        if self.stdin is not None and not self.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers.values():
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = self._read["stdout"][0] if self.stdout is not None else None
        err = self._read["stderr"][0] if self.stderr is not None else None
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return out, err

    def __enter__(self) -> WarmProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        self.wait()


def fresh(code: str, **env: str) -> str:
    """What ``python -c code`` prints in a fresh interpreter (not a fork of the server), with
    ``env`` added to its environment: for what a process sets up as it starts (torch's CPU
    kernels, glibc's heap, the hash seed)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def popen(args: list[str], **kwargs: Any) -> WarmProcess | subprocess.Popen:
    """Start ``args`` (``[sys.executable, ...]``) as a fork of this process's server, or, for a
    command it does not run, as ``subprocess.Popen(args, **kwargs)``."""
    env = kwargs.get("env")
    if _job(args) is None or "PYTHONHASHSEED" in (os.environ if env is None else env):
        return subprocess.Popen(args, **kwargs)  # (its hash seed is the server's own)
    return WarmProcess(args, **kwargs)


def run(
    args: list[str],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """As ``subprocess.run``, the job started by :func:`popen` (killed past ``timeout``)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = _PIPE
    if input is not None:
        kwargs["stdin"] = _PIPE
    with popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# ------------------------------------------------------------------------- the server's side


def _serve(path: str) -> None:
    import numpy  # noqa: F401  the imports every job shares, and nothing of seneca
    import PIL.Image  # noqa: F401
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    # fork is safe from a process of one Python thread (numpy's BLAS keeps a pool of its own,
    # made again after a fork, as in every DataLoader worker forked after importing torch)
    assert threading.active_count() == 1, threading.enumerate()
    own_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in own_paths]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    woken_r, woken_w = os.pipe()
    os.set_blocking(woken_w, False)
    signal.set_wakeup_fd(woken_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ, "accept")
    events.register(woken_r, selectors.EVENT_READ, "reap")
    events.register(sys.stdin, selectors.EVENT_READ, "stop")
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in events.select():
            if key.data == "stop":
                return
            if key.data == "reap":
                os.read(woken_r, 4096)
            else:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    events.close()
                    for fd in (woken_r, woken_w, listener.fileno(), conn.fileno()):
                        os.close(fd)
                    for other in waiting.values():
                        os.close(other.fileno())
                    _run(request, fds, base)  # never returns
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                waiting[pid] = conn
            while waiting:  # a SIGCHLD may stand for several children
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = waiting.pop(pid, None)
                if conn is None:
                    continue
                with contextlib.suppress(OSError):  # (the test is gone)
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _HEADER.size:
        data += conn.recv(1 << 16)
    (length,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + length:
        data += conn.recv(1 << 16)
    return json.loads(data[_HEADER.size : _HEADER.size + length]), list(fds)


def _run(request: dict, fds: list[int], base: list[str]) -> None:
    """In the forked job: become the interpreter the request names, run it, exit as it would."""
    import builtins
    import gc
    import random
    import runpy
    import traceback
    import types

    import numpy
    import torch

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request["new_session"]:
        os.setsid()
    for i, fd in enumerate(fds):
        os.dup2(fd, i, inheritable=True)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    # the server's stream objects are kept: collected, they would close the job's 0, 1 and 2
    _kept.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
    # (the job's streams stay open until it exits)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False))  # noqa: SIM115
    out = open(1, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        out, line_buffering=os.isatty(1), write_through=unbuffered
    )
    err = open(2, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        err, errors="backslashreplace", line_buffering=True
    )
    kind, target, rest = request["kind"], request["target"], request["args"]
    extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = "" if kind == "-c" else os.getcwd()
    if kind == "script":
        first = os.path.dirname(os.path.realpath(target))
    sys.path[:] = [first, *extra, *base]
    sys.path_importer_cache.clear()
    random.seed()
    numpy.random.seed()
    torch.seed()

    code, interrupted = 0, False
    main = types.ModuleType("__main__")
    names: dict = main.__dict__
    try:
        if kind == "-c":
            sys.argv = ["-c", *rest]
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        elif kind == "-m":
            sys.argv = [target, *rest]
            names = runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *rest]
            names = runpy.run_path(target, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:
        traceback.print_exc()
        code = 1
    # the interpreter's exit: its threads, its atexit functions, its objects
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    names.clear()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exec(args: list[str]) -> int:
    """``python warm.py --exec SCRIPT ARGS...``: run ``python SCRIPT ARGS...`` as a job of the
    server the environment names, as if this process had become it (its standard streams,
    environment and directory; SIGTERM, SIGINT and SIGHUP sent here passed on; its exit status
    this process's). For a launcher that starts commands itself (torchrun ``--no-python``)."""
    job = popen([sys.executable, *args])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: job.send_signal(number))
    code = job.wait()
    if code < 0:  # ended by a signal: end by it too
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    if sys.argv[1] == "--exec":
        sys.exit(_exec(sys.argv[2:]))
    _serve(sys.argv[1])
    Path(sys.argv[1]).unlink(missing_ok=True)
