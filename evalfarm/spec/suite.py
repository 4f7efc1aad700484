"""The spawn task format: a suite of coding tasks for agents, run by ``evalfarm ab --executor spawn``
and, with ``adapters:``, by ``evalfarm run`` like any spec.

    name: greet
    repo: .                    # a local path (relative to this file) or a git URL
    base: main                 # a commit or ref: resolved to a commit when the file is loaded
    isolation: sandbox         # the default; none: unsandboxed (refused by spawn workers without --allow-unsandboxed)
    env: [GOFLAGS]             # variables passed through to the agent, setup and check
    adapters:                  # for `evalfarm run` (ab takes the first agent's as its default)
      - {id: claude, provider: agent, agent: claude, model: claude-sonnet-4-5}
    tasks:
      - id: fix-greeting
        prompt: Change the greeting in hello.py to "hello, world".
        check: grep -q 'hello, world' hello.py     # run in the worktree after the agent exits; 0 passes
        setup: pip install -e .                     # optional, run before the agent
        timeout_s: 600                              # optional; default the adapter's (1800 s)

A suite becomes an ``EvalSpec`` whose ``workspace`` is ``{repo, base, isolation, env}`` and whose
prompts are the tasks (``prompt`` is the text), so both formats validate, plan and run the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from pydantic import Field, ValidationError, field_validator

from ..canonical import content_key
from ..errors import SpecError
from .models import AdapterSpec, EnvNames, EvalSpec, Isolation, Limits, PromptSpec, Thresholds, Workspace, _Model
from .validation import spec_error

SUITE_KEYS = ("repo", "tasks")  # a YAML mapping with both is a spawn suite, not a spec


class SpawnTask(_Model):
    id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    check: str = Field(min_length=1)
    setup: str | None = Field(default=None, min_length=1)
    timeout_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    tags: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _no_slash(cls, value: str) -> str:
        if "/" in value or not value.strip():
            raise ValueError("task id must be non-blank and must not contain '/'")
        return value


class SpawnSuite(_Model):
    name: str | None = Field(default=None, min_length=1)
    lineage_tag: str | None = None
    repo: str = Field(min_length=1)
    base: str = Field(min_length=1)
    isolation: Isolation = "sandbox"
    limits: Limits = Field(default_factory=Limits)
    max_tokens_per_task: int | None = Field(default=None, ge=1)
    seeds: dict[str, int] = Field(default_factory=dict)
    env: EnvNames = Field(default_factory=list)
    adapters: list[Union[str, AdapterSpec]] = Field(default_factory=list)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    trials: int = Field(default=1, ge=1, le=1000)
    tasks: list[SpawnTask] = Field(min_length=1)

    scorer: ClassVar[str] = "check"  # for the A/B harness: the check command is the quality verdict

    @property
    def workspace(self) -> Workspace:
        return Workspace(repo=self.repo, base=self.base, isolation=self.isolation, env=self.env, limits=self.limits,
                         max_tokens_per_task=self.max_tokens_per_task, seeds=self.seeds)

    def prompts(self) -> list[PromptSpec]:
        return [PromptSpec(id=t.id, text=t.prompt, check=t.check, setup=t.setup, timeout_s=t.timeout_s, tags=t.tags)
                for t in self.tasks]

    def content_hash(self) -> str:
        """What the suite asks: the tasks, the commit they start from, the isolation (not the local path)."""
        return content_key({"name": self.name, "scorer": self.scorer, "base": self.base,
                            "isolation": self.isolation, "env": self.env,
                            "tasks": [t.model_dump(mode="json") for t in self.tasks]})

    def to_spec(self) -> EvalSpec:
        return EvalSpec(name=self.name or "suite", lineage_tag=self.lineage_tag, adapters=self.adapters,
                        prompts=self.prompts(), thresholds=self.thresholds, trials=self.trials,
                        workspace=self.workspace)


def is_suite(data: Any) -> bool:
    return isinstance(data, dict) and all(k in data for k in SUITE_KEYS)


def parse_suite(data: dict, path: Path, lines: dict | None) -> SpawnSuite:
    try:
        suite = SpawnSuite.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, SpawnSuite, str(path), lines) from None
    except RecursionError:
        raise SpecError("nested too deeply", path=str(path)) from None
    first: dict[str, int | None] = {}
    for i, task in enumerate(suite.tasks):
        line = (lines or {}).get(("tasks", i, "id"))
        if task.id in first:
            raise SpecError(f"duplicate task id {task.id!r} (first on line {first[task.id]}); ids must be unique",
                            path=str(path), line=line, field=f"tasks[{i}].id")
        first[task.id] = line
    return suite if suite.name else suite.model_copy(update={"name": path.stem})


def suite_spec(data: dict, path: Path, lines: dict) -> tuple[EvalSpec, dict]:
    """A suite file as a spec for ``evalfarm run``, and its line map in the spec's terms."""
    suite = parse_suite(data, path, lines)
    if not suite.adapters:
        raise SpecError("a suite run by `evalfarm run` names its agents: add adapters: [{id: claude, provider: "
                        "agent, agent: claude, model: MODEL}] (evalfarm ab --executor spawn does not need them)",
                        path=str(path), line=1, field="adapters")
    return suite.to_spec(), spec_lines(lines)


def spec_lines(lines: dict) -> dict:
    """Map a suite's YAML paths onto the spec's: tasks[i].prompt -> prompts[i].text, repo -> workspace.repo."""
    out = dict(lines)
    for loc, line in lines.items():
        if not loc:
            continue
        head, rest = loc[0], loc[1:]
        if head == "tasks":
            rest = tuple("text" if p == "prompt" and len(rest) == 2 else p for p in rest)
            out[("prompts", *rest)] = line
        elif head in ("repo", "base", "isolation", "env", "limits", "max_tokens_per_task", "seeds"):
            out[("workspace", head, *rest)] = line
    return out
