"""Fixtures that start real things: a redis-server on a free port, evalfarm workers."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EVALFARM = [sys.executable, "-m", "evalfarm.cli"]


def wait_for(pred, timeout: float = 60.0, what: str = "condition", every: float = 0.1):
    """Poll ``pred()`` until it returns something true (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM a process group started with its own session; SIGKILL it if it is not gone in 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A real redis-server we own: we can kill and restart it."""

    def __init__(self, tmp: Path, password: str | None = None, appendonly: bool = False) -> None:
        self.port, self.dir, self.password, self.appendonly = free_port(), tmp, password, appendonly
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (.ci/run installs it)")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def env_for(broker: str | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("EVALFARM_BROKER_URL", None)
    if broker:
        env["EVALFARM_BROKER_URL"] = broker
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "plugins"), str(ROOT)])
    env.update(extra)
    return env


class Worker:
    def __init__(self, broker: str, tmp: Path, pool: str = "all", concurrency: int = 4,
                 extra_args: list[str] | None = None, **env: str) -> None:
        self.log = tmp / f"worker-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen([*EVALFARM, "worker", "--pool", pool, "-c", str(concurrency),
                                      "--loglevel", "INFO", *(extra_args or [])],
                                     env=env_for(broker, **env), stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.log.exists() and b"ready." in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(30)

    def stop(self) -> None:
        stop_group(self.proc)


@pytest.fixture
def start_worker(tmp_path):
    workers: list[Worker] = []

    def start(broker: str, **kw) -> Worker:
        w = Worker(broker, tmp_path, **kw)
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.stop()


# EVALFARM_TEST_EXEC=1: every run_cli execs a fresh interpreter, as a user's shell does (slower; the
# forked runner below must give the same results, and tests/test_cli_process.py checks a few of them).
EXEC_CLI = os.environ.get("EVALFARM_TEST_EXEC", "") not in ("", "0")


def run_cli(*args: str, broker: str | None = None, cwd: Path | None = None, timeout: float = 120,
            exec_: bool = False, **env: str) -> subprocess.CompletedProcess:
    """The real command line in its own process: real exit codes, real stdout and stderr (file
    descriptors 1 and 2), its own environment and working directory. By default the process is a fork
    of this test process, where evalfarm is already imported: a user's command costs ~1 s of interpreter
    start and imports that says nothing about the command (issue 24: half the suite's time went there).
    ``exec_=True`` (or EVALFARM_TEST_EXEC=1) execs ``python -m evalfarm.cli`` instead."""
    env_ = env_for(broker, **env)
    if exec_ or EXEC_CLI:
        return subprocess.run([*EVALFARM, *args], env=env_, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    return forked_cli(list(args), env_, cwd, timeout)


def forked_cli(args: list[str], env: dict[str, str], cwd: Path | None, timeout: float) -> subprocess.CompletedProcess:
    import selectors
    import traceback

    import evalfarm.cli

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setsid()  # its own group, as a shell's job: a timeout kills what it started too
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, err_r, out_w, err_w, null):
                os.close(fd)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
            sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
            sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            # as `python -m evalfarm.cli` starts: the cwd first on the path, then PYTHONPATH's entries
            import importlib

            extra = [os.getcwd(), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
            sys.path[:0] = [p for p in extra if p not in sys.path]
            importlib.invalidate_caches()  # files a test wrote since this process last looked
            sys.argv = ["evalfarm", *args]
            try:
                evalfarm.cli.main(args=args, prog_name="evalfarm")
                code = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(pid)
                for fd in chunks:
                    os.close(fd)
                raise subprocess.TimeoutExpired([*EVALFARM, *args], timeout)
            for key, _ in sel.select(min(left, 1.0)):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    while True:  # the pipes closed: the child has ended or is ending
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            _kill_group(pid)
            raise subprocess.TimeoutExpired([*EVALFARM, *args], timeout)
        time.sleep(0.005)
    return subprocess.CompletedProcess([*EVALFARM, *args], os.waitstatus_to_exitcode(status),
                                       _text(b"".join(chunks[out_r])), _text(b"".join(chunks[err_r])))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` reads a pipe: universal newlines."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


@pytest.fixture
def provider():
    """Start real `evalfarm mock-provider` servers: ``provider("--latency-ms", "200")``."""
    from providers_fixture import MockProviderProc

    procs: list = []

    def start(*args: str):
        p = MockProviderProc(*args)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()
