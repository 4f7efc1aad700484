"""evalfarm: a distributed eval farm for LLM prompts, models and coding agents.

    from evalfarm import load_spec, Runner, save_report
    report = Runner().run(load_spec("suite.yaml"), base_dir="eval/specs")
    save_report(report, state_dir=".evalfarm")

Plug-ins import what they need from here (``Completion``, ``register_adapter``...), never from
internal modules. Names load lazily, so ``import evalfarm`` (and ``evalfarm --help``) stays cheap.

The layout is the architecture: ``spec`` (what the user wrote) -> ``core`` (plan, checks,
verdicts, aggregation, report) and ``engine`` (adapters, judges, one item) -> ``backends``
(in-process and the Celery farm) under one ``orchestrator``; ``ci``, ``ab`` and ``cli`` on top.
The core knows nothing of Celery or Redis. ``stats`` (paired intervals, power, the sequential
test: ``PairedSequentialTest``, ``paired_interval``, ``power``) is pure and standard library only.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_spec": "evalfarm.spec.load", "open_spec": "evalfarm.spec.load", "SpecFile": "evalfarm.spec.load",
    "EvalSpec": "evalfarm.spec.models", "PromptSpec": "evalfarm.spec.models", "AdapterSpec": "evalfarm.spec.models",
    "JudgeSpec": "evalfarm.spec.models", "Criterion": "evalfarm.spec.models",
    "Runner": "evalfarm.runs.submit", "Orchestrator": "evalfarm.runs.submit",
    "RunReport": "evalfarm.core.report.model", "Outcome": "evalfarm.core.outcome",
    "save_report": "evalfarm.runs.archive",
    "Adapter": "evalfarm.engine.adapters", "Completion": "evalfarm.engine.adapters",
    "Judge": "evalfarm.engine.judges", "JudgeResult": "evalfarm.engine.judges",
    "register_adapter": "evalfarm.engine.registry", "register_judge": "evalfarm.engine.registry",
    "EvalfarmError": "evalfarm.errors", "SpecError": "evalfarm.errors",
    "PairedSequentialTest": "evalfarm.stats", "SequentialDecision": "evalfarm.stats",
    "paired_interval": "evalfarm.stats", "PairedInterval": "evalfarm.stats", "power": "evalfarm.stats",
    "Power": "evalfarm.stats", "Variance": "evalfarm.stats", "assumed_variance": "evalfarm.stats",
    "observed_variance": "evalfarm.stats",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalfarm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
