"""The spawn executor: each arm's tasks run as real coding agents in isolated git worktrees.

The suite is a spawn suite (spec/suite.py: ``repo``, ``base``, tasks with ``prompt`` and ``check``),
its workspace pinned to a commit when it is loaded. The agent is the suite's first agent adapter,
overridden by the flags (``--agent``, ``--model``, ``--base-url``, ``--api-key-env``, ``--price``,
``--timeout``); each arm's profile addendum reaches the agent the way that agent takes instructions
(claude ``--append-system-prompt``, others a prepended instruction or its instructions file). Every
(arm, task, trial) is one item of a farm run: one Celery task on the spawn queue, or in this
process two at a time. The check command is the quality verdict.

Rows go to the production spend ledger (``STATE/cost/ledger.jsonl``), one per run, with the farm
run id and a timestamp (real spend is never deduplicated), plus what the artifact shows per arm:
agent name and version, the models used, turns, tool calls, diff size. Cost is the agent's own, or
priced from ``--price``/the adapter's ``price``; else it is not measured and the comparison is
``incomparable`` (never a partial winner).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..agents.adapter import AgentAdapter
from ..runs.ledger import agent_fields
from ..agents.repos import is_url
from ..errors import SpecError, UsageError
from ..spec.models import AdapterSpec, Price
from ..spec.sourcemap import line_for, load_yaml, read_text
from ..spec.suite import SpawnSuite, is_suite, parse_suite
from ..agents.workspace import pin_workspace
from ..runs.state import StateDir
from .executors import ArmRun, _RowWriter

ADAPTER_ID = "ab-spawn"


def _public(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class SpawnExecutor(_RowWriter):
    kind = "spawn"
    deterministic = False

    def __init__(self, *, agent: str | None = None, model: str | None = None, role: str = "backend",
                 timeout_s: float | None = None, base_url: str | None = None, api_key_env: str | None = None,
                 price: tuple[float, float] | None = None) -> None:
        self.flags = {"agent": agent, "model": model, "base_url": base_url, "api_key_env": api_key_env,
                      "price": price, "timeout_s": timeout_s}
        self.role = role
        self.spec: AdapterSpec | None = None
        self.adapter_obj: AgentAdapter | None = None
        self.suite: SpawnSuite | None = None

    # -- the suite and the agent ------------------------------------------------------------------
    def load_suite(self, path: Path | str) -> SpawnSuite:
        """Validate the spawn suite, pin its workspace, choose and check the agent (installed: else exit 2
        with the install command)."""
        path = Path(path)
        data, lines = load_yaml(read_text(path), path)
        if not is_suite(data):
            raise SpecError("--executor spawn needs a spawn suite: repo, base and tasks of id, prompt and check "
                            "(see evalfarm/spec/suite.py); this looks like a prompt suite", path=str(path), line=1)
        suite = parse_suite(data, path, lines)

        def where(*loc: Any) -> dict[str, Any]:
            return {"path": str(path), "line": line_for(lines, loc)}

        ws = pin_workspace(suite.workspace, path.parent, where, at=())
        suite = suite.model_copy(update={"repo": ws.repo, "base": ws.base})
        self.spec = self._adapter_spec(suite)
        adapter = AgentAdapter(self.spec)
        adapter.use_workspace(ws)
        try:
            adapter.preflight()
        except ValueError as exc:
            raise UsageError(f"--executor spawn: {exc}") from None
        self.adapter_obj, self.suite = adapter, suite
        return suite

    def _adapter_spec(self, suite: SpawnSuite) -> AdapterSpec:
        f = self.flags
        first = next((a for a in suite.adapters if isinstance(a, AdapterSpec) and a.is_agent), None)
        agent = f["agent"] or (first.agent if first else None)
        if agent is None:
            raise UsageError("--executor spawn: which agent? pass --agent claude|codex|gemini|aider|opencode, or "
                             "add an agent adapter to the suite (adapters: [{id: a, provider: agent, agent: claude, "
                             "model: M}])")
        if first is not None and first.agent != agent:
            first = None  # --agent names another agent: the suite's settings do not apply to it
        fields: dict[str, Any] = first.model_dump(exclude={"id"}, exclude_unset=True) if first else {}
        fields.update(provider="agent", agent=agent)
        for name in ("model", "base_url", "api_key_env", "timeout_s"):
            if f[name] is not None:
                fields[name] = f[name]
        if f["price"] is not None:
            fields["price"] = Price(input=f["price"][0], output=f["price"][1])
        if not fields.get("model"):
            raise UsageError("--executor spawn needs --model NAME (the model pin the agent is run with), or a model "
                             "in the suite's agent adapter")
        if agent == "command" and not fields.get("template"):
            raise UsageError("--agent command needs the command line: give the suite an adapter with agent: command "
                             "and template: 'my-agent --model {model} {prompt}'")
        try:
            return AdapterSpec(id=ADAPTER_ID, **fields)
        except ValueError as exc:
            raise UsageError(f"--executor spawn: {str(exc).splitlines()[-1].strip()}") from None

    def _ready(self) -> tuple[AdapterSpec, AgentAdapter, SpawnSuite]:
        if self.spec is None or self.adapter_obj is None or self.suite is None:
            raise UsageError("--executor spawn: the suite was not loaded (SpawnExecutor.load_suite)")
        return self.spec, self.adapter_obj, self.suite

    # -- ArmExecutor ------------------------------------------------------------------------------
    def built_adapters(self) -> dict[str, Any]:
        """The agent adapter ``load_suite`` built and preflighted: the run uses it as it is."""
        return {ADAPTER_ID: self._ready()[1]}

    def adapter(self) -> AdapterSpec:
        return self._ready()[0]

    def describe(self) -> dict[str, Any]:
        spec, adapter, suite = self._ready()
        binary_version = adapter._resolve()[1]
        return {"kind": self.kind, "adapter": ADAPTER_ID, "agent": spec.agent, "agent_pin": adapter.driver.pin or None,
                "agent_version": binary_version, "model": spec.model, "role": self.role,
                "timeout_s": spec.timeout_s,
                "isolation": suite.isolation, "base": suite.base,
                "repo": suite.repo if is_url(suite.repo) else Path(suite.repo).name,
                "base_url": _public(spec.base_url), "template": spec.template,
                "price_usd_per_mtok": ({"input_per_mtok": spec.price.input, "output_per_mtok": spec.price.output}
                                       if spec.price else None)}

    def default_ledger(self) -> Path:
        return StateDir.of().cost_ledger

    def row_for(self, run: ArmRun, plan_id: str) -> dict[str, Any]:
        row = super().row_for(run, plan_id)
        o = run.outcome
        if o.get("error") is None and (o.get("agent") or {}).get("cost_source") is None:
            row["cost_usd"] = None  # neither the agent nor a price said what it cost
        row.update({**agent_fields(o), "role": self.role})
        return row
