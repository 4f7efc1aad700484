"""Where the agent CLIs are and which versions: `make agents` installs them under
``$EVALFARM_AGENTS_DIR`` (default ``~/.cache/evalfarm/agents``), one dir per agent, outside any repo.
An agent found nowhere is a one-line error naming the install command."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from .pins import AIDER, CLAUDE, CODEX, GEMINI, OPENCODE
from .errors import AgentNotInstalled

# agent -> (executable, path under its install dir, package, pinned version, make target)
INSTALLS = {
    "claude": ("claude", "node_modules/.bin/claude", "@anthropic-ai/claude-code", CLAUDE, "agents"),
    "codex": ("codex", "node_modules/.bin/codex", "@openai/codex", CODEX, "agents"),
    "gemini": ("gemini", "node_modules/.bin/gemini", "@google/gemini-cli", GEMINI, "agents-all"),
    "opencode": ("opencode", "node_modules/.bin/opencode", "opencode-ai", OPENCODE, "agents-all"),
    "aider": ("aider", "venv/bin/aider", "aider-chat", AIDER, "agents-all"),
}
_VERSION = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")


def agents_dir() -> Path:
    return Path(os.environ.get("EVALFARM_AGENTS_DIR") or Path.home() / ".cache" / "evalfarm" / "agents")


def install_hint(agent: str) -> str:
    exe, _, package, pin, target = INSTALLS[agent]
    where = agents_dir() / agent
    how = (f"python3 -m venv {where}/venv && {where}/venv/bin/pip install {package}=={pin}" if agent == "aider"
           else f"npm install --prefix {where} {package}@{pin}")
    return f"{agent}: not installed: run `make {target}` ({how})"


def find(agent: str) -> Path | None:
    """The agent's executable: the pinned install first, else one on PATH."""
    if agent not in INSTALLS:
        return None
    exe, rel, *_ = INSTALLS[agent]
    pinned = agents_dir() / agent / rel
    if os.access(pinned, os.X_OK):
        return pinned
    found = shutil.which(exe)
    return Path(found) if found else None


@lru_cache(maxsize=32)
def _version(path: str, mtime: float) -> str | None:
    """``--version`` under a throwaway HOME: even that writes state there (gemini, codex, opencode)."""
    with tempfile.TemporaryDirectory(prefix="evalfarm-agent-version-") as home:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        env.update({"HOME": home, "XDG_CONFIG_HOME": home, "XDG_CACHE_HOME": home, "XDG_DATA_HOME": home,
                    "XDG_STATE_HOME": home, "TMPDIR": home, "NO_COLOR": "1"})
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                                 stdin=subprocess.DEVNULL, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None
    m = _VERSION.search(out.stdout + out.stderr)
    return m.group(0) if out.returncode == 0 and m else None


def detect(agent: str) -> tuple[Path, str] | None:
    """(executable, version) of an installed agent that answers ``--version``, else None."""
    path = find(agent)
    if path is None:
        return None
    version = _version(str(path), path.stat().st_mtime)
    return (path, version) if version else None


def require(agent: str) -> tuple[Path, str]:
    found = detect(agent)
    if found is None:
        if agent not in INSTALLS:
            raise AgentNotInstalled(f"agent: unknown agent {agent!r}; expected one of "
                                    f"{', '.join([*INSTALLS, 'command'])}")
        raise AgentNotInstalled(install_hint(agent))
    return found
