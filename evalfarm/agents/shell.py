"""A spawn task's own commands, ``setup`` before the agent and ``check`` after it: a shell line run in
the worktree, in its own process group (a timeout kills the whole group), stdin from /dev/null,
output (stdout and stderr together) to a file. Neither is the agent: a check that fails or times
out is the task's quality verdict, a setup that fails is a runtime error of the task."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..redact import redact
from .runner import kill_group, wait_usage

TAIL_BYTES = 4000


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None  # None: timed out (the group was killed)
    timed_out: bool
    wall_s: float
    output_path: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def output(self) -> bytes:
        try:
            return self.output_path.read_bytes()
        except OSError:
            return b""

    def tail(self, limit: int = TAIL_BYTES) -> str:
        """The end of the output, secrets masked (the part a reader needs: the failing test, the error)."""
        data = self.output()
        text = data[-limit:].decode("utf-8", errors="replace")
        return redact(("..." if len(data) > limit else "") + text)

    def last_line(self) -> str:
        lines = [ln.strip() for ln in self.tail(1000).splitlines() if ln.strip()]
        return lines[-1][:200] if lines else "(no output)"

    def sha256(self) -> str:
        return hashlib.sha256(self.output()).hexdigest()


def run_shell(command: str, cwd: Path, env: dict[str, str], timeout_s: float, output_path: Path,
              kill_grace_s: float = 2.0, wrap=None) -> ShellResult:
    """``wrap`` puts the shell in the task's jail (jail.py) and under its limits."""
    shell = shutil.which("bash", path=env.get("PATH")) or "/bin/sh"
    if wrap is not None and not shell.startswith(("/usr/", "/bin/")):
        shell = "/bin/sh"
    output_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    argv = [shell, "-c", command]
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(wrap(argv) if wrap is not None else argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    timed_out = False
    if wait_usage(proc, max(0.1, timeout_s)) is None:
        timed_out = True
        kill_group(proc.pid, kill_grace_s)
        proc.wait()
    kill_group(proc.pid, 0.5)  # nothing it started outlives it
    return ShellResult(None if timed_out else proc.returncode, timed_out, round(time.monotonic() - started, 3),
                       output_path)


def shell_env(scratch_env: dict[str, str], pass_env: tuple[str, ...], source: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of setup and check: the base variables, the task's private HOME/XDG/TMPDIR and the
    variables the workspace names; no agent key, nothing else of the caller's."""
    source = dict(os.environ) if source is None else source
    env = {k: source[k] for k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ") if k in source}
    env.update(scratch_env)
    env.update({k: source[k] for k in pass_env if k in source})
    env.update({"NO_COLOR": "1", "TERM": "dumb"})
    return env
