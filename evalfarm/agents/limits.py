"""Per-task resource limits (``limits: {memory_mb, pids, cpu_s, file_mb}``) and what the task used.

Where this process may create cgroups (as root on most hosts: cgroup v2 with the memory and pids
controllers, else the v1 ``memory`` and ``pids`` hierarchies), the task's processes go into a cgroup
of their own, under this process's: ``memory_mb`` and ``pids`` are enforced for the whole task and
its peak memory is read from the cgroup. Always, ``prlimit`` sets per-process rlimits: ``cpu_s``
(RLIMIT_CPU), ``file_mb`` (RLIMIT_FSIZE) and no core dumps. Without a writable cgroup, memory and
pids are not enforced (``enforced_by`` says so) and the peak memory is the largest process's RSS.
CPU seconds come from the cgroup (v2 ``cpu.stat``, v1 ``cpuacct``), else from ``wait4`` (what the
task's processes reaped: bwrap's own PID 1 does not pass its children's time up, so this undercounts).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup")
DEFAULTS = {"memory_mb": 4096, "pids": 512, "cpu_s": 3600, "file_mb": 2048}


def _own(controller: str) -> str | None:
    """This process's cgroup path in ``controller``'s v1 hierarchy ('' for v2's unified line)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return path
    except OSError:
        pass
    return None


def _v2_dir() -> Path | None:
    if not (ROOT / "cgroup.controllers").is_file():
        return None
    ctrls = set((ROOT / "cgroup.controllers").read_text().split())
    own = _own("")
    if not {"memory", "pids"} <= ctrls or own is None:
        return None
    return ROOT / own.lstrip("/")


@dataclass
class TaskLimits:
    memory_mb: int = DEFAULTS["memory_mb"]
    pids: int = DEFAULTS["pids"]
    cpu_s: int = DEFAULTS["cpu_s"]
    file_mb: int = DEFAULTS["file_mb"]
    name: str = "task"
    groups: list[Path] = field(default_factory=list)
    kind: str = "rlimit"

    @classmethod
    def of(cls, spec: Any, name: str) -> "TaskLimits":
        values = {k: getattr(spec, k, None) or v for k, v in DEFAULTS.items()}
        return cls(**values, name=name)

    def open(self) -> "TaskLimits":
        """Make the task's cgroup(s) where possible; the limits hold from the first exec."""
        tag = "evalfarm-" + re.sub(r"[^A-Za-z0-9_.-]", "", self.name)
        try:
            v2 = _v2_dir()
            if v2 is not None:
                g = v2 / tag
                g.mkdir()
                self.groups = [g]
                (g / "memory.max").write_text(str(self.memory_mb * 2**20))
                (g / "memory.swap.max").write_text("0") if (g / "memory.swap.max").exists() else None
                (g / "pids.max").write_text(str(self.pids))
                self.kind = "cgroup v2"
                return self
            mem, pids = _own("memory"), _own("pids")
            if mem is not None and pids is not None and (ROOT / "memory").is_dir() and (ROOT / "pids").is_dir():
                gm, gp = ROOT / "memory" / mem.lstrip("/") / tag, ROOT / "pids" / pids.lstrip("/") / tag
                gm.mkdir()
                self.groups = [gm]
                gp.mkdir()
                self.groups.append(gp)
                (gm / "memory.limit_in_bytes").write_text(str(self.memory_mb * 2**20))
                try:
                    (gm / "memory.memsw.limit_in_bytes").write_text(str(self.memory_mb * 2**20))
                except OSError:
                    pass
                (gp / "pids.max").write_text(str(self.pids))
                cpu = _own("cpuacct")
                if cpu is not None and (ROOT / "cpuacct").is_dir():
                    gc = ROOT / "cpuacct" / cpu.lstrip("/") / tag
                    try:
                        gc.mkdir()
                        self.groups.append(gc)
                    except OSError:
                        pass
                self.kind = "cgroup v1"
        except OSError:
            self.close()
            self.groups, self.kind = [], "rlimit"
        return self

    @property
    def enforced_by(self) -> str:
        if self.groups:
            return f"{self.kind} (memory_mb, pids) + rlimit (cpu_s, file_mb)"
        return "rlimit (cpu_s, file_mb); memory_mb and pids not enforced: no writable cgroup here"

    def prefix(self) -> list[str]:
        """The argv prefix: join the cgroup(s), then exec ``prlimit`` with the rlimits, then the command."""
        out = []
        if self.groups:
            join = "; ".join(f"echo $$ > '{g}/cgroup.procs'" for g in self.groups)
            out = ["/bin/sh", "-c", f'{join} && exec "$@"', "evalfarm-limits"]
        if shutil.which("prlimit"):
            out += ["prlimit", f"--cpu={self.cpu_s}", f"--fsize={self.file_mb * 2**20}", "--core=0", "--"]
        return out

    def _read(self, name: str) -> int | None:
        for g in self.groups:
            try:
                return int((g / name).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return None

    def peak_memory_mb(self, rusage: Any = None) -> float | None:
        peak = self._read("memory.peak" if self.kind == "cgroup v2" else "memory.max_usage_in_bytes")
        if peak is not None:
            return round(peak / 2**20, 1)
        return round(rusage.ru_maxrss / 1024, 1) if rusage is not None else None

    def cpu_used(self) -> float | None:
        """CPU seconds of every process the task's cgroup held (None without one)."""
        if self.kind == "cgroup v2":
            for g in self.groups:
                try:
                    for line in (g / "cpu.stat").read_text().splitlines():
                        if line.startswith("usage_usec "):
                            return round(int(line.split()[1]) / 1e6, 3)
                except OSError:
                    pass
            return None
        ns = self._read("cpuacct.usage")
        return round(ns / 1e9, 3) if ns is not None else None

    def pids_peak(self) -> int | None:
        return self._read("pids.peak")

    def kill_all(self) -> int:
        """SIGKILL whatever is still in the task's cgroup (a belt: the jail's PID namespace already ends them)."""
        n = 0
        for g in self.groups:
            try:
                pids = [int(p) for p in (g / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    n += 1
                except ProcessLookupError:
                    pass
        return n

    def close(self) -> None:
        self.kill_all()
        for g in self.groups:
            for _ in range(50):
                try:
                    g.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)

    def record(self) -> dict[str, Any]:
        return {"memory_mb": self.memory_mb, "pids": self.pids, "cpu_s": self.cpu_s, "file_mb": self.file_mb,
                "enforced_by": self.enforced_by}
