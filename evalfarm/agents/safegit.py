"""Git as the harness runs it: nothing configured in (or planted into) a task repo ever runs.

A repo's ``.git/config`` can name programs git runs on its own: ``core.fsmonitor`` (on every command
that reads the index), ``filter.*.smudge/clean/process`` (checkout, add, diff), ``diff.*.textconv``
and ``diff.external``, hooks. With the worker's environment around, that is code of the repo's author
holding the worker's secrets. So every git command of the harness gets

- an environment that holds no secret: PATH and a fixed locale only, an empty HOME, no system or
  global config (``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``), no prompts;
- ``-c core.fsmonitor=false -c core.hooksPath=/dev/null`` and no attributes file of ours;
- no transport at all (``protocol.allow=never``, and ``GIT_NO_LAZY_FETCH`` where git knows it): in a
  partial clone, reading a missing object fetches it through the repo's ``remote.*.uploadpack`` or
  ``core.sshCommand``, programs the repo's config names;
- for ``diff``: ``--no-textconv --no-ext-diff``.

Filter drivers are defined only in config; the checkouts of jail.py use a fresh clone's config (which
defines none) and an ``info/attributes`` that unsets ``filter``/``diff``/``merge`` for every path, so
attributes from the repo select no driver; the diff after the agent is taken through a git dir of the
harness's own (``harness_env``), never through the one the agent could write.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.attributesFile=/dev/null",
        "-c", "protocol.allow=never")
# every path: no filter, no diff or merge driver, no re-encoding (highest precedence: $GIT_DIR/info/attributes)
NO_DRIVERS = "* !filter !diff !merge !working-tree-encoding\n"


def env(home: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a harness git command: no secrets, no config but the repo's own."""
    out = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C",
           "HOME": str(home) if home else "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GIT_OPTIONAL_LOCKS": "0",
           "GIT_NO_LAZY_FETCH": "1"}
    out.update(extra or {})
    return out


def argv(*args: str) -> list[str]:
    return ["git", *SAFE, *args]


def run(*args: str, cwd: Path | None = None, extra_env: dict[str, str] | None = None, timeout: float = 600,
        text: bool = True, input: bytes | str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv(*args), cwd=cwd, capture_output=True, text=text, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL, input=input,
                              env=env(extra=extra_env))
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "" if text else b"",
                                           f"git {args[0]} timed out after {timeout:g} s" if text else b"timed out")


def objects_dir(repo: Path) -> Path | None:
    """The object store of ``repo`` (a work tree's ``.git/objects`` or a bare repo's ``objects``)."""
    for cand in (repo / ".git" / "objects", repo / "objects"):
        if cand.is_dir():
            return cand
    return None


def harness_env(git_dir: Path, worktree: Path, index: Path) -> dict[str, str]:
    """Variables that point git at the harness's own git dir and index over the agent's files."""
    return {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(worktree), "GIT_INDEX_FILE": str(index)}
