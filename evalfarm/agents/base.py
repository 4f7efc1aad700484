"""The one interface every agent driver implements, and the values that cross it.

A driver is pure: ``build`` turns a request into an argv, an environment and config files for the
private HOME; ``parse`` turns what the agent printed (and files it wrote) into usage. Running the
process is the runner's job (runner.py), the worktree the sandbox's (sandbox.py), so a driver can be
read and tested on its own and a new agent is one small module.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping
from urllib.parse import urlsplit

from .errors import AgentOutputError, AgentSetupError

# Always passed through: what a CLI and the tools it runs need to start at all.
BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
GITCONFIG = "[user]\n\tname = evalfarm agent\n\temail = agent@evalfarm.invalid\n"


@dataclass(frozen=True)
class Price:
    """USD per million tokens; given to agents that price from a table we write (aider, opencode)."""

    input: float
    output: float


@dataclass(frozen=True)
class AgentRequest:
    prompt: str
    model: str
    base_url: str | None = None  # the model endpoint (e.g. mock-provider's http://127.0.0.1:PORT/v1); None: the agent's default
    addendum: str = ""  # the arm's profile addendum, applied the way this agent takes instructions
    key_from: str | None = None  # caller variable holding the key (default: the agent's own key variable)
    pass_env: tuple[str, ...] = ()  # further caller variables let through, by name
    extra_env: Mapping[str, str] = field(default_factory=dict)  # explicit values (after the allow-list)
    extra_args: tuple[str, ...] = ()  # appended to the agent's argv (e.g. claude --allowedTools ...)
    price: Price | None = None
    jailed: bool = False  # runs inside evalfarm's jail (jail.py): an agent's own nested sandbox is off


@dataclass(frozen=True)
class Scratch:
    """A private HOME, XDG dirs and TMPDIR for one run: whatever an agent writes outside its worktree
    lands here and is removed with it."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def private(self) -> Path:
        """Files we hand the agent that must not be inside its worktree (instructions, logs)."""
        return self.root / "evalfarm"

    def env(self) -> dict[str, str]:
        home = str(self.home)
        return {"HOME": home, "XDG_CONFIG_HOME": f"{home}/.config", "XDG_CACHE_HOME": f"{home}/.cache",
                "XDG_DATA_HOME": f"{home}/.local/share", "XDG_STATE_HOME": f"{home}/.local/state",
                "TMPDIR": str(self.tmp), "TMP": str(self.tmp), "TEMP": str(self.tmp)}

    def create(self) -> Scratch:
        for sub in ("home/.config", "home/.cache", "home/.local/share", "home/.local/state", "tmp", "evalfarm"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        gitconfig = self.home / ".gitconfig"
        if not gitconfig.exists():  # with no identity, aider writes a placeholder one into the repo's shared .git/config
            gitconfig.write_text(GITCONFIG, encoding="utf-8")
        return self


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)  # written before the run, all under the scratch root
    outputs: dict[str, Path] = field(default_factory=dict)  # files ``parse`` reads after the run


@dataclass(frozen=True)
class AgentUsage:
    """What one agent run consumed, from the agent's own report.

    ``input_tokens`` counts every prompt token, cached or not (OpenAI's convention; for Anthropic
    the cache reads and writes are added back); ``cached_input_tokens`` is the part read from cache.
    ``cost_usd`` is None when the agent does not price (codex, gemini) or could not (price unknown):
    the caller prices it. ``turns`` is the number of model round trips the agent reports (codex does
    not report them: its count is of completed steps, see codex.py). ``error`` is the agent's own
    account of a failure it reported in its output. ``models`` lets the caller check the pin: Claude
    Code, for one, silently sends a newer model for a retired id.
    """

    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    turns: int
    tool_calls: int
    final_message: str
    cached_input_tokens: int = 0
    error: str | None = None
    models: tuple[str, ...] = ()  # the models the agent says it used (empty: it does not say)

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in
                ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


class Driver:
    """Base of the drivers: the allow-listed environment and the helpers they share."""

    name: ClassVar[str]
    binary: ClassVar[str]  # the executable's name
    package: ClassVar[str]  # what to install (npm package or PyPI project)
    pin: ClassVar[str]
    key_env: ClassVar[str | None]  # the agent's own key variable
    quiet_env: ClassVar[Mapping[str, str]] = {}  # telemetry, update checks, error reports off
    # files (name -> file name in the scratch's private dir) its trajectory is read from besides stdout
    trajectory_files: ClassVar[Mapping[str, str]] = {}

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        raise NotImplementedError

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        raise NotImplementedError

    def environment(self, request: AgentRequest, scratch: Scratch,
                    source: Mapping[str, str] | None = None) -> dict[str, str]:
        """Allow-list: base variables, the private dirs, the agent's key, what the caller names."""
        source = os.environ if source is None else source
        env = {k: source[k] for k in BASE_ENV if k in source}
        env.update(scratch.env())
        env.update({"NO_COLOR": "1", "TERM": "dumb"})
        if self.key_env:
            key_from = request.key_from or self.key_env
            if key_from in source:
                env[self.key_env] = source[key_from]
            elif self.key_env not in request.extra_env:
                raise AgentSetupError(f"agent {self.name}: the key variable {key_from} is not set; "
                                      f"export it (it is passed to {self.name} as {self.key_env})")
        for name in request.pass_env:
            if name in source:
                env[name] = source[name]
        env.update(request.extra_env)
        env.update(self.quiet_env)
        return env


def json_objects(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream; other lines (a warning printed to stdout) are skipped."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                events.append(value)
    return events


def json_lines(stdout: str, agent: str) -> list[dict[str, Any]]:
    """``json_objects``, and an agent that printed none is an output error."""
    events = json_objects(stdout)
    if not events:
        raise AgentOutputError(f"{agent}: no JSON events on stdout ({_preview(stdout)})")
    return events


def as_int(value: Any, what: str, agent: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise AgentOutputError(f"{agent}: {what} is not a token count: {value!r}")
    return int(value)


def as_cost(value: Any, tokens: int, agent: str) -> float | None:
    """The agent's cost; None when absent, or 0 for a run that used tokens (the agent had no price)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise AgentOutputError(f"{agent}: cost is not a number: {value!r}")
    return None if value == 0 and tokens > 0 else float(value)


def openai_url(base_url: str) -> str:
    """An OpenAI-style base URL: a bare host gets /v1."""
    return base_url.rstrip("/") + "/v1" if urlsplit(base_url).path in ("", "/") else base_url.rstrip("/")


def root_url(base_url: str) -> str:
    """The server root for SDKs that add their own version path (Anthropic /v1, Gemini /v1beta)."""
    return re.sub(r"/v1(beta)?/?$", "", base_url.rstrip("/"))


def _preview(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text[:n] + ("..." if len(text) > n else "")) if text else "empty"
