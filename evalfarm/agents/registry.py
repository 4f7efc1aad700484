"""Agent name -> driver, imported lazily (a driver module is only loaded when it is used)."""
from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

from .base import Driver
from .detect import INSTALLS, require
from .errors import AgentNotInstalled, AgentSetupError

DRIVERS = {
    "claude": ("claude", "ClaudeDriver"),
    "codex": ("codex", "CodexDriver"),
    "gemini": ("gemini", "GeminiDriver"),
    "aider": ("aider", "AiderDriver"),
    "opencode": ("opencode", "OpencodeDriver"),
}
AGENTS = (*DRIVERS, "command")


def get_driver(agent: str, template: str | None = None) -> Driver:
    """The driver for ``agent``; ``command`` needs its ``template``."""
    if agent == "command":
        if not template:
            raise AgentSetupError("command: give the command template (e.g. `my-agent --model {model} {prompt}`)")
        from .command import CommandDriver

        return CommandDriver(template)
    if agent not in DRIVERS:
        raise AgentSetupError(f"agent: unknown agent {agent!r}; expected one of {', '.join(AGENTS)}")
    module, cls = DRIVERS[agent]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)()


def resolve(driver: Driver) -> tuple[Path, str | None]:
    """(executable, version) for a driver; not installed is a one-line AgentNotInstalled.
    A command's program is found on PATH, or taken as a path (relative to the current directory)."""
    if driver.name in INSTALLS:
        return require(driver.name)
    program = driver.binary
    found = Path(program).resolve() if "/" in program else (Path(p) if (p := shutil.which(program)) else None)
    if found is None or not found.is_file() or not os.access(found, os.X_OK):
        raise AgentNotInstalled(f"command: {program}: not found or not executable")
    return found, None
