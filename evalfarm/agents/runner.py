"""Run one agent in a given working directory: stdin is /dev/null (two agents hang on an open
stdin), the agent leads its own process group (a timeout, and the end of the run, kill the whole
group, children included), stdout and stderr go to files, and the agent's own output is parsed.

Whatever goes wrong once the agent runs (non-zero exit, timeout, output we cannot read, a failure
the agent reports) is returned as ``AgentRun.error``: a runtime error of that run, never raised,
never a quality failure. Setup problems (not installed, no key) raise before anything starts.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..redact import redact
from .base import AgentRequest, AgentUsage, Driver, Scratch
from .errors import AgentOutputError
from .registry import resolve

MAX_STDOUT = 64 * 1024 * 1024
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)


@dataclass(frozen=True)
class AgentRun:
    agent: str
    version: str | None
    exit_code: int | None  # negative: killed by that signal
    timed_out: bool
    wall_s: float
    stdout_path: Path
    stderr_path: Path
    usage: AgentUsage | None  # parsed even after a failure when the agent still reported it
    error: str | None  # set: a runtime_error (one line, secrets masked)
    leftovers_killed: int = 0  # processes of the agent's group still alive after it exited
    cpu_s: float | None = None  # user + system CPU of the whole process tree (wait4)
    peak_memory_mb: float | None = None  # the task cgroup's peak, else the largest process's RSS

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "version": self.version, "exit_code": self.exit_code,
                "timed_out": self.timed_out, "wall_s": self.wall_s, "error": self.error,
                "leftovers_killed": self.leftovers_killed, "cpu_s": self.cpu_s, "peak_memory_mb": self.peak_memory_mb,
                "usage": self.usage.as_dict() if self.usage else None}


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            pids.append(int(entry))
    return pids


def kill_group(pgid: int, grace_s: float) -> int:
    """SIGTERM the group, SIGKILL what is left after ``grace_s``; wait until none is alive.
    Returns how many processes were alive when it started."""
    alive = group_members(pgid)
    if not alive:
        return 0
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return len(alive)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not group_members(pgid):
                return len(alive)
            time.sleep(0.02)
    return len(alive)


def wait_usage(proc: subprocess.Popen, timeout_s: float | None):
    """Wait for ``proc`` at most ``timeout_s`` (None: for ever) and reap it with ``wait4``: its rusage
    (the whole tree it reaped) or None on timeout (the process is left running)."""
    if timeout_s is not None:
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:  # no pidfd (old kernel): plain wait, no figures
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return None
            return False
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(max(0.0, timeout_s) * 1000):
                return None
        finally:
            os.close(fd)
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return rusage


def _tail_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _mask(text: str, env: dict[str, str]) -> str:
    for name, value in env.items():
        if _SECRET_NAME.search(name) and len(value) >= 4:
            text = text.replace(value, "***")
    return redact(" ".join(text.split()))


def run_agent(driver: Driver, request: AgentRequest, workdir: Path, scratch: Scratch, *, timeout_s: float,
              binary: Path | None = None, version: str | None = None, out_dir: Path | None = None,
              kill_grace_s: float = 2.0, wrap: Callable[[list[str]], list[str]] | None = None,
              limits: Any = None) -> AgentRun:
    """Run ``driver``'s agent once in ``workdir`` with ``scratch`` as its HOME/XDG/TMPDIR. ``wrap`` may put
    the argv inside something (the jail: jail.py); the wrapper leads the process group. ``limits``
    (limits.TaskLimits) prefixes its cgroup and rlimits and reports the peak memory."""
    if binary is None:
        binary, version = resolve(driver)
    scratch.create()
    invocation = driver.build(request, binary, workdir, scratch)
    root = scratch.root.resolve()
    for path, text in invocation.files.items():
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"{driver.name}: refusing to write {path} outside the scratch dir {root}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    out_dir = out_dir or scratch.private
    out_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = out_dir / f"{driver.name}.stdout", out_dir / f"{driver.name}.stderr"
    started = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        argv = wrap(invocation.argv) if wrap is not None else invocation.argv
        if limits is not None:
            argv = limits.prefix() + argv
        proc = subprocess.Popen(argv, cwd=workdir, env=invocation.env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True, close_fds=True)
    timed_out = False
    rusage = wait_usage(proc, timeout_s)
    if rusage is None:
        timed_out = True
        kill_group(proc.pid, kill_grace_s)
        rusage = wait_usage(proc, None)
    wall = round(time.monotonic() - started, 3)
    leftovers = kill_group(proc.pid, 0.5)  # nothing the agent started outlives its run
    if limits is not None:
        leftovers += limits.kill_all()
    cpu = round(rusage.ru_utime + rusage.ru_stime, 3) if rusage else None
    if limits is not None and limits.cpu_used() is not None:
        cpu = limits.cpu_used()
    peak = limits.peak_memory_mb(rusage or None) if limits is not None else (
        round(rusage.ru_maxrss / 1024, 1) if rusage else None)
    usage, error = None, None
    try:
        if os.path.getsize(stdout_path) > MAX_STDOUT:
            raise AgentOutputError(f"{driver.name}: stdout is larger than {MAX_STDOUT // 2**20} MiB")
        usage = driver.parse(stdout_path.read_text(encoding="utf-8", errors="replace"), invocation)
    except AgentOutputError as exc:
        error = f"unparseable output: {exc}"
    if timed_out:
        error = f"{driver.name}: timed out after {timeout_s:g} s (process group killed)"
    elif proc.returncode != 0:
        error = f"{driver.name}: exit code {proc.returncode}: {_tail_line(stderr_path) or '(no stderr)'}"
    elif error is None and usage is not None and usage.error:
        error = usage.error
    return AgentRun(driver.name, version, proc.returncode, timed_out, wall, stdout_path, stderr_path, usage,
                    _mask(error, invocation.env) if error else None, leftovers, cpu, peak)
