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


def run_cli(*args: str, broker: str | None = None, cwd: Path | None = None, timeout: float = 120,
            **env: str) -> subprocess.CompletedProcess:
    """The real console entry point in a subprocess: real exit codes, real stderr."""
    return subprocess.run([*EVALFARM, *args], env=env_for(broker, **env), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


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
