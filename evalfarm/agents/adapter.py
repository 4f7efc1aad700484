"""``provider: agent``: a coding agent as an adapter of the engine. One ``complete`` is one spawn task.

A task runs in a throw-away checkout (its own ``.git``) of the spec's workspace at its pinned
commit, with a private HOME/XDG/TMPDIR and an allow-listed environment: ``setup`` (if any), the
agent (its profile addendum is ``PromptSpec.system``), then the diff against the base (figures, and
the patch stored content-addressed, blobs.py), then ``check`` (exit 0 passes; the output's tail
kept, the whole of it stored). Under ``isolation: sandbox`` (the default) setup, agent and check run
in the task's jail (jail.py) under its limits (limits.py), and the agent reaches the model only
through the task's relay (model_relay.py), which holds the real key; the outcome records the
isolation, the limits and what the task used, the relay's token counts and the deterministic
envelope. The sandbox goes afterwards, always.

The check's verdict reaches the item through ``Completion.meta["checks"]`` (the engine adds it to
the text checks); usage, diff, check and versions through ``Completion.meta["agent"]`` (the item's
``agent`` record). A failed setup, an agent's non-zero exit, a timeout or output we cannot read
raise ``AgentRunError``: a runtime error of the item, never a quality failure. A failed check is
quality. Cost is the agent's own when it reports one, else priced from the adapter's ``price``,
else not measured (``cost_source`` None).
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..engine.adapters import Completion
from ..providers.access import key_for
from ..core import failure
from ..errors import InfrastructureError
from ..redact import redact, register_secret_env
from ..spec.models import AdapterSpec, PromptSpec, Workspace
from . import blobs, jail, policy, trajectory
from .base import AgentRequest, Price
from .diff import capture
from .detect import agents_dir
from .errors import AgentOutputError, AgentSetupError, SandboxError
from .limits import TaskLimits
from .registry import get_driver, resolve
from .repos import local_repo
from .runner import AgentRun, run_agent
from .sandbox import kill_processes_in, sandbox
from .shell import run_shell, shell_env

CHECK_MIN_S = 60.0  # a check always gets at least this long, whatever the agent left of the budget
ADAPTER_VERSION = 1
# where an agent goes when the adapter names no base_url (the relay forwards there)
DEFAULT_BASE_URLS = {"claude": "https://api.anthropic.com", "codex": "https://api.openai.com/v1",
                     "gemini": "https://generativelanguage.googleapis.com", "opencode": "https://api.openai.com/v1",
                     "aider": "https://api.openai.com/v1"}


def envelope(seeds: dict[str, int] | None) -> dict[str, str]:
    """The deterministic envelope every process of a task gets (and the outcome records): UTC, a fixed
    locale, PYTHONHASHSEED (0 unless the suite names it) and the suite's other seeds."""
    out = {"TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
    out.update({k: str(v) for k, v in (seeds or {}).items()})
    return out


_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|SESSION|COOKIE|PRIVATE", re.I)


# a spawn worker hands an infra-failed task back to the spawn queue (another worker takes it when one is
# alive: executors/celery/spawn.py) instead of running it again here; one process retries it here
RETRY_HERE = True

class AgentRunError(Exception):
    """The task could not be measured (setup failed, the agent exited non-zero, timed out, printed
    what its driver cannot read): a runtime error. ``agent`` is what is known of the run."""

    def __init__(self, message: str, agent: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.agent = agent


def as_run_error(exc: Exception, agent: str) -> Exception:
    """A task's failure with what is known of the run in ``.agent``; one raised outside AgentRunError
    (no sandbox, the CLI missing, a key variable unset, an OSError) is the host's: marked ``infra``."""
    if not isinstance(getattr(exc, "agent", None), dict):
        exc.agent = {"agent": agent, "infra": True}  # type: ignore[attr-defined]
    return exc


def spawn_concurrency() -> int:
    """Agent tasks at once in one process of the embedded backend (EVALFARM_SPAWN_CONCURRENCY, default 2)."""
    try:
        return max(1, int(os.environ.get("EVALFARM_SPAWN_CONCURRENCY") or 2))
    except ValueError:
        return 2


def allowed_env(names: list[str]) -> tuple[str, ...]:
    """The workspace's ``env`` names, refusing secret-looking ones unless this host allows them
    (EVALFARM_SPAWN_ENV_ALLOW, comma-separated): a shared farm runs other people's specs."""
    allow = {n.strip() for n in os.environ.get("EVALFARM_SPAWN_ENV_ALLOW", "").split(",") if n.strip()}
    for name in names:
        if _SECRETISH.search(name) and name not in allow:
            raise AgentSetupError(f"workspace env {name} looks like a secret and is not passed to agents on this "
                                  "host; add it to EVALFARM_SPAWN_ENV_ALLOW where the agents run to allow it")
    return tuple(names)


class AgentAdapter:
    """A coding agent under test: ``{id, provider: agent, agent: claude|codex|gemini|aider|opencode|command,
    model, template (command), args, base_url, api_key_env, price, timeout_s}``."""

    cacheable = False  # an agent run is never answered from the response cache

    def __init__(self, entry: "AdapterSpec | str") -> None:
        if isinstance(entry, str) or not entry.is_agent:
            raise KeyError(f"adapter {entry if isinstance(entry, str) else entry.id!r}: an agent adapter is an "
                           "object {id: ..., provider: agent, agent: claude, model: ...}")
        self.id, self.spec = entry.id, entry
        try:
            self.driver = get_driver(entry.agent or "", entry.template)
        except AgentSetupError as exc:
            raise ValueError(str(exc)) from None
        # the spec wrote the agent's defaults in (AdapterSpec): 1800 s and the agent's own key variable
        self.timeout_s = entry.timeout_s
        self.key_from = entry.api_key_env
        register_secret_env(self.key_from)
        self.workspace: Workspace | None = None
        self.slots = ("spawn", spawn_concurrency())  # the embedded backend's cap, shared by every agent adapter
        self._binary: tuple[Path, str | None] | None = None
        self._blob_dir: Path | None = None

    @property
    def blob_dir(self) -> Path:
        """Where patches and check logs go, handed over by whoever runs the adapter: ``runs/`` (the
        run's state dir) or a spawn worker (its own, from the worker command)."""
        if self._blob_dir is None:
            raise AgentSetupError(f"adapter {self.id!r}: no blob directory was handed over for its patches and logs")
        return self._blob_dir

    def use_blob_dir(self, path: Path) -> None:
        """Whoever runs the adapter hands over where its patches and logs go."""
        self._blob_dir = Path(path)

    # -- set-up ----------------------------------------------------------------------------------
    def use_workspace(self, workspace: Workspace | None) -> None:
        """The spec's workspace (build_engine hands it over): the repo and commit every task starts from."""
        self.workspace = workspace

    def preflight(self) -> None:
        """Before anything is queued: the agent is installed, its key variable and the workspace's env
        are allowed here, a sandbox can be made (bwrap). Raises ValueError (one line; the engine adds the spec line)."""
        try:
            self._resolve()
            self._key_var()
            if self.workspace is not None:
                allowed_env(self.workspace.env)
                if self.workspace.isolation == "sandbox":
                    why = jail.available()
                    if why:
                        raise AgentSetupError(why)
        except (AgentSetupError, SandboxError) as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:  # KeyRefused and the like: a configuration problem of this host
            raise ValueError(str(exc)) from None

    def _resolve(self) -> tuple[Path, str | None]:
        if self._binary is None:
            self._binary = resolve(self.driver)
        return self._binary

    def _key_var(self) -> str:
        key_for(self.key_from, self.spec.base_url or "")  # the allow-lists of providers/access.py
        return self.key_from

    def config(self) -> dict[str, Any]:
        s, ws = self.spec, self.workspace
        return {"kind": "agent", "version": ADAPTER_VERSION, "id": self.id, "agent": s.agent, "pin": self.driver.pin,
                "model": s.model, "template": s.template, "args": s.args, "base_url": s.base_url,
                "price": s.price.model_dump() if s.price else None, "timeout_s": self.timeout_s,
                "workspace": ws.model_dump(mode="json") if ws else None}

    # -- one task --------------------------------------------------------------------------------
    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        """The task runs in a thread; cancelling it (Ctrl-C on an embedded run) kills what runs in its
        sandbox, so the thread ends and the sandbox goes at once rather than after the agent's timeout."""
        retried: list[str] = []
        while True:
            state: dict[str, Any] = {}
            try:
                return await asyncio.to_thread(self.run_task, prompt, trial, state)
            except asyncio.CancelledError:
                state["cancelled"] = True
                if "root" in state:
                    kill_processes_in(state["root"])
                if state.get("limits") is not None:
                    state["limits"].kill_all()
                raise
            except InfrastructureError:
                raise  # the run store or the broker: the item is redelivered, not retried here
            except Exception as exc:  # noqa: BLE001  the class decides: an infra failure is run again
                error: Any = as_run_error(exc, self.driver.name)
                if failure.error_class(type(exc).__name__, str(exc), error.agent) != failure.INFRA_FAILED:
                    raise
                if len(retried) >= (failure.infra_retries() if RETRY_HERE else 0):
                    error.agent.update(infra=True, attempts=len(retried) + 1, retried=retried)
                    raise
                retried.append(redact(str(exc))[:300])

    def run_task(self, prompt: PromptSpec, trial: int, state: dict[str, Any] | None = None) -> Completion:
        state = {} if state is None else state
        ws = self.workspace
        if ws is None:
            raise AgentSetupError(f"adapter {self.id!r}: no workspace (the spec's workspace: {{repo, base}})")
        binary, version = self._resolve()
        self._key_var()
        pass_env = allowed_env(ws.env)
        repo, commit = local_repo(ws.repo, ws.base)
        budget = prompt.timeout_s or self.timeout_s
        deadline = time.monotonic() + budget
        sealed = ws.isolation == "sandbox"
        info: dict[str, Any] = {"agent": self.driver.name, "version": version, "model": self.spec.model,
                                "isolation": ws.isolation, "base": commit}
        if not sealed and policy.sandbox_required():
            raise AgentRunError(policy.REFUSED, info)
        if sealed:
            why = jail.available()
            if why:
                raise AgentSetupError(why)
        env_fixed = envelope(ws.seeds)
        info["envelope"] = env_fixed
        with sandbox(repo, commit) as box:
            info["sandbox"] = box.root.name
            state["root"] = box.root
            limits = TaskLimits.of(ws.limits, box.root.name).open() if sealed else None
            state["limits"] = limits
            try:
                run, checks = self._task(prompt, box, binary, version, budget, deadline, pass_env, env_fixed, limits,
                                         info, state)
            finally:
                if limits is not None:
                    limits.close()
        usage = run.usage
        assert usage is not None  # run.ok implies a parsed usage
        cost, source = usage.cost_usd, "agent"
        if cost is None and self.spec.price is not None:
            cost = (usage.input_tokens * self.spec.price.input + usage.output_tokens * self.spec.price.output) / 1e6
            source = "price"
        info["cost_source"] = source if cost is not None else None
        return Completion(text=usage.final_message, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                          cost_usd=round(cost, 12) if cost is not None else 0.0,
                          meta={"agent": info, "checks": checks, "call_ms": run.wall_s * 1000.0, "attempts": 1})

    def _task(self, prompt: PromptSpec, box, binary: Path, version: str | None, budget: float, deadline: float,
              pass_env: tuple[str, ...], env_fixed: dict[str, str], limits: TaskLimits | None,
              info: dict[str, Any], state: dict[str, Any]) -> tuple[AgentRun, list[dict[str, Any]]]:
        """Setup, agent, diff and check of one task in its sandbox ``box`` (jailed when ``limits`` is set)."""
        commit = box.base
        wrap = None
        if limits is not None:
            info["limits"] = limits.record()
            shell_jail = self._jail(box, binary, None)
            wrap = lambda argv: limits.prefix() + shell_jail.argv(argv, box.worktree)  # noqa: E731
        env = {**shell_env(box.scratch.env(), pass_env), **env_fixed}
        if prompt.setup:
            setup = run_shell(prompt.setup, box.worktree, env, budget, box.harness / "setup.out", wrap=wrap)
            info["setup"] = {"exit_code": setup.exit_code, "timed_out": setup.timed_out, "wall_s": setup.wall_s}
            if not setup.ok:
                why = f"timed out after {budget:g} s" if setup.timed_out else f"exit code {setup.exit_code}"
                info["infra"] = True  # the task's environment, not the agent: infra_failed (core/failure.py)
                raise AgentRunError(f"setup failed ({why}): {setup.last_line()}", info)
        if state.get("cancelled"):
            raise AgentRunError("cancelled before the agent started", info)
        relay_calls: list[dict[str, Any]] = []
        run = self._run_agent(prompt, box, binary, version, max(1.0, deadline - time.monotonic()), pass_env,
                              env_fixed, limits, info, relay_calls)
        info.update(self._usage_info(run, self.spec.model))
        info.update(trajectory.store(
            self.driver.name, run.stdout_path, self.blob_dir, [os.environ.get(self.key_from, "")], self.spec.model,
            version, prompt.text, {k: box.scratch.private / n for k, n in self.driver.trajectory_files.items()},
            relay_calls if info.get("relay") is not None else None, run.usage.as_dict() if run.usage else None))
        if info.get("relay") is not None and run.usage is not None:  # wire counts beside the agent's own
            info["relay"]["matches_agent"] = (info["relay"]["input_tokens"], info["relay"]["output_tokens"]) == (
                run.usage.input_tokens, run.usage.output_tokens)
        if run.timed_out:  # say the budget the user set, not what setup left of it
            stalled = (info.get("relay") or {}).get("stalled_s") or 0.0
            why = (f"; the model endpoint had not answered its last call for {stalled:.0f} s (stalled: "
                   "infra_failed)" if failure.endpoint_stalled(info) else "")
            raise AgentRunError(f"{self.driver.name}: timed out after {budget:g} s (the task's timeout_s; "
                                f"process group killed){why}", info)
        if not run.ok:
            raise AgentRunError(run.error or f"{self.driver.name} failed", info)
        relay = info.get("relay")
        if relay and relay.get("max_tokens") is not None and (
                relay["capped"] or relay["input_tokens"] + relay["output_tokens"] > relay["max_tokens"]):
            raise AgentRunError(f"{self.driver.name}: the task used {relay['input_tokens'] + relay['output_tokens']} "
                                f"tokens on the wire, over its max_tokens_per_task ({relay['max_tokens']}); the relay "
                                "refused further calls", info)
        try:
            diff = capture(box.worktree, commit, box.harness_git)
        except AgentOutputError as exc:
            raise AgentRunError(str(exc), info) from None
        if diff.patch:
            blobs.put(diff.patch, "patch", self.blob_dir)
        info["diff"] = diff.figures()
        checks = []
        if prompt.check:
            check = run_shell(prompt.check, box.worktree, env, max(CHECK_MIN_S, deadline - time.monotonic()),
                              box.harness / "check.out", wrap=wrap)
            output = check.output()
            info["check"] = {"exit_code": check.exit_code, "timed_out": check.timed_out, "wall_s": check.wall_s,
                             "output_sha256": blobs.put(output, "log", self.blob_dir) if output else None}
            reason = ("exit 0" if check.ok else f"timed out after {check.wall_s:g} s" if check.timed_out
                      else f"exit {check.exit_code}") + f": {check.last_line()}"
            checks.append({"kind": "command", "passed": check.ok, "reason": reason, "format": False,
                           "output": check.tail()})
        return run, checks

    def _jail(self, box, binary: Path, relay_dir: Path | None) -> jail.Jail:
        """The task's jail: read-write its checkout and private dirs, read-only the agent's install dir,
        the repo's objects (the checkout's alternates) and what a command template names."""
        readonly: list[Path] = [p for p in (box.objects,) if p is not None]
        binary = Path(binary)
        installs = agents_dir()
        if binary.is_relative_to(installs):
            readonly += [installs / self.driver.name, *jail.venv_bases(installs / self.driver.name)]
        elif self.driver.name == "command":
            readonly += jail.named_files([str(binary), *self.driver.words[1:]], not policy.sandbox_required())
        else:
            readonly.append(binary.resolve().parent.parent)  # an agent on PATH: its install tree
        s = box.scratch
        return jail.Jail([box.worktree, s.home, s.tmp, s.private], readonly, relay_dir)

    def _run_agent(self, prompt: PromptSpec, box, binary: Path, version: str | None, timeout_s: float,
                   pass_env: tuple[str, ...], env_fixed: dict[str, str], limits: TaskLimits | None,
                   info: dict[str, Any], relay_calls: list[dict[str, Any]] | None = None) -> AgentRun:
        s = self.spec
        base_url, wrap, relay, relay_dir = s.base_url, None, None, None
        key_env = self.driver.key_env or self.key_from  # the variable the agent finds its key in
        extra_env = dict(env_fixed)
        # unsealed, a command agent gets the adapter's key variable as it is named
        passed = pass_env + (() if self.driver.key_env else (self.key_from,))
        if limits is not None:
            upstream = s.base_url or DEFAULT_BASE_URLS.get(self.driver.name)
            passed = pass_env
            if upstream:
                from .model_relay import TaskRelay  # aiohttp's server: only when an agent runs (~140 ms to import)

                relay_dir = Path(tempfile.mkdtemp(prefix="efr-", dir="/tmp"))  # a unix socket path is short
                relay = TaskRelay(relay_dir / "m.sock", upstream, key_for(self.key_from, upstream),
                                  self.workspace.max_tokens_per_task if self.workspace else None)
                base_url = relay.inside_url(jail.PORT)
                extra_env.update({key_env: relay.token, "EVALFARM_MODEL_BASE_URL": base_url})
            else:
                extra_env[key_env] = "evalfarm-no-model-endpoint"
            task_jail = self._jail(box, binary, relay_dir)
            wrap = lambda argv: task_jail.argv(argv, box.worktree)  # noqa: E731
        request = AgentRequest(prompt.text, s.model, base_url, addendum=prompt.system or "", key_from=self.key_from,
                               pass_env=passed, extra_env=extra_env, extra_args=tuple(s.args or ()),
                               jailed=limits is not None,
                               price=Price(s.price.input, s.price.output) if s.price else None)
        try:
            return run_agent(self.driver, request, box.worktree, box.scratch, timeout_s=timeout_s, binary=binary,
                             version=version, out_dir=box.harness / "agent", wrap=wrap, limits=limits)
        finally:
            if relay is not None:
                relay.close()
                info["relay"] = relay.as_dict()
                # the wire's own account of the model endpoint (core/failure.py decides infra by it)
                forwarded = [c for c in relay.calls if c.get("forwarded")]
                failed = [c for c in forwarded if failure.endpoint_failed(c.get("status"))]
                # a call still unanswered when the agent stopped: how long the endpoint had kept it waiting
                waiting = [time.time() - c["time"] for c in relay.calls
                           if (c.get("unanswered") or "status" not in c) and "time" in c]
                info["relay"].update(upstream_failures=len(failed),
                                     last_call_failed=bool(forwarded) and failure.endpoint_failed(
                                         forwarded[-1].get("status")),
                                     stalled_s=round(max(waiting), 3) if waiting else 0.0)
                if relay_calls is not None:
                    relay_calls.extend(relay.calls)  # the trajectory's second source (trajectory.py)
            if relay_dir is not None:
                shutil.rmtree(relay_dir, ignore_errors=True)

    @staticmethod
    def _usage_info(run: AgentRun, model: str) -> dict[str, Any]:
        out: dict[str, Any] = {"wall_s": run.wall_s, "exit_code": run.exit_code, "timed_out": run.timed_out,
                               "leftovers_killed": run.leftovers_killed,
                               "used": {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "peak_memory_mb": run.peak_memory_mb}}
        if run.usage is not None:
            u = run.usage
            out.update(turns=u.turns, tool_calls=u.tool_calls, cached_input_tokens=u.cached_input_tokens,
                       models=list(u.models),
                       # the agent used exactly the pinned model (Claude Code swaps a retired id silently)
                       model_pin_ok=(set(u.models) == {model}) if u.models else None)
        return out
