"""The repo a spawn task works in: a local path, or a git URL kept as a bare mirror per machine.

A spec names ``repo`` and ``base``; ``resolve`` turns ``base`` into the commit every trial and every
worker starts from (a branch that moves after submission changes nothing). A URL is cloned once into
``$EVALFARM_SPAWN_DIR/repos/<hash>.git`` (``git clone --mirror``, under a lock, so two workers on one
machine do not clone twice) and fetched again only when a commit is missing. URLs carrying a password
are refused: they would land in reports; git's credential helpers exist for that.

Only the mirror's ``clone`` and ``fetch`` keep the user's environment and global config (credential
helpers, ssh keys), and they read no config of a task repo (the mirror's is git's own). Every command
that reads a repo a spec names (``rev-parse`` on a local path or a mirror) goes through safegit.py: in a
partial clone a missing object makes git fetch it through the repo's own ``remote.*.uploadpack`` or
``core.sshCommand``, a program of the repo's author.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from . import safegit
from .errors import SandboxError
from .sandbox import scratch_parent

_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")  # git@host:owner/repo.git
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
GIT_TIMEOUT_S = 600.0


def _error(field: str, message: str) -> SandboxError:
    """A SandboxError that says which spec field (``repo`` or ``base``) it is about."""
    exc = SandboxError(message)
    exc.field = field  # type: ignore[attr-defined]
    return exc


def is_url(repo: str) -> bool:
    return bool(_URL.match(repo) or _SCP.match(repo))


def check_url(url: str) -> str:
    """A URL without a password (user names are fine: git@host, https://user@host)."""
    if _URL.match(url) and urlsplit(url).password:
        raise _error("repo", f"repo {_public(url)}: the URL carries a password; it would be written into reports. "
                           "Drop it and let a git credential helper (or an ssh key) supply it")
    return url


def _public(url: str) -> str:
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.hostname or ""
    return parts._replace(netloc=f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")).geturl()


def _git(*args: str, cwd: Path | None = None, timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        # the user's HOME and global config stay (credential helpers, ssh keys for the mirror's URL); the
        # repo's own fsmonitor and hooks do not run
        return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", *args], cwd=cwd, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"git {args[0]} timed out after {timeout:g} s")


def _reason(done: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (done.stderr or "").splitlines() if ln.strip()]
    return " ".join((lines[-1] if lines else f"git exited {done.returncode}").split())


def mirror_dir(url: str) -> Path:
    return scratch_parent() / "repos" / (hashlib.sha256(url.encode()).hexdigest()[:20] + ".git")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield


def mirror(url: str) -> Path:
    """The local bare mirror of ``url``, cloned on first use."""
    check_url(url)
    target = mirror_dir(url)
    with _locked(target):
        if (target / "HEAD").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=target.parent))
        try:
            done = _git("clone", "--mirror", "--quiet", "--", url, str(tmp / "m.git"))
            if done.returncode != 0:
                raise _error("repo", f"repo {_public(url)}: cannot clone: {_reason(done)}")
            os.replace(tmp / "m.git", target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _rev_parse(repo: Path, base: str) -> str | None:
    done = safegit.run("-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}",
                       timeout=GIT_TIMEOUT_S)
    out = done.stdout.strip()
    return out if done.returncode == 0 and _SHA.match(out) else None


def local_repo(repo: str, base: str) -> tuple[Path, str]:
    """(a local repository holding ``base``, the commit ``base`` names). A URL's mirror is fetched
    once more when the commit is not in it yet."""
    if base.startswith("-"):
        raise _error("base", f"base {base!r}: a commit or ref cannot start with '-'")
    if is_url(repo):
        path = mirror(repo)
        commit = _rev_parse(path, base)
        if commit is None:
            with _locked(path):
                done = _git("-C", str(path), "fetch", "--quiet", "--prune", "origin")
            if done.returncode != 0:
                raise _error("repo", f"repo {_public(repo)}: cannot fetch: {_reason(done)}")
            commit = _rev_parse(path, base)
    else:
        path = Path(repo)
        if not path.is_dir():
            raise _error("repo", f"repo {repo}: no such directory")
        top = safegit.run("-C", str(path), "rev-parse", "--git-dir", timeout=GIT_TIMEOUT_S)
        if top.returncode != 0:
            raise _error("repo", f"repo {repo}: not a git repository ({_reason(top)})")
        commit = _rev_parse(path, base)
    if commit is None:
        raise _error("base", f"base {base!r}: no such commit, branch or tag in {_public(repo)}")
    return path, commit
