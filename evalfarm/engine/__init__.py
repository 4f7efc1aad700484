"""The engine: adapter and judge contracts, where they come from, and what one item goes through.

``adapters`` and ``judges`` (the contracts and the offline implementations), ``registry``
(built-ins by name, plug-ins by entry point), ``items`` (call, check, judge, decide),
``cache`` (the response cache contract and its SQLite implementation), ``rubric``
(drafting a case's criteria with a model). Nothing here knows Celery or Redis.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import SpecError
from ..spec.models import EvalSpec
from ..spec.sourcemap import dotted
from .adapters import Adapter, CallableAdapter, Completion, MockAdapter
from .cache import ResponseCache
from .items import Engine
from .judges import CallableJudge, Judge, JudgeResult
from .registry import UnknownPlugin, register_adapter, register_judge, resolve_adapter, resolve_judge

Where = Callable[..., dict[str, Any]]  # loc -> SpecError location keywords (SpecFile.where)


def build_engine(spec: EvalSpec, where: Where | None = None, *, adapters: dict[str, Adapter] | None = None,
                 judge: Judge | None = None, cache: ResponseCache | None = None, preflight: bool = False) -> Engine:
    """The spec's adapters and judge, resolved (or given, for the Python API). An unknown name or
    an adapter missing its endpoint is a SpecError pointing at the spec's line. An adapter may take
    the spec's workspace (``use_workspace``: coding agents) and check, with ``preflight`` (where a run
    is submitted, not on workers), what it needs from this host (``preflight()``: an agent CLI installed)."""
    where = where or (lambda *loc: {})
    problem = spec.spawn_problem()
    if problem is not None:
        raise SpecError(problem[1], field=dotted(problem[0]), **where(*problem[0]))
    resolved: dict[str, Adapter] = {}
    for i, entry in enumerate(spec.adapters):
        adapter_id = entry if isinstance(entry, str) else entry.id
        if adapters is not None:
            resolved[adapter_id] = adapters[adapter_id]
            continue
        try:
            adapter = resolved[adapter_id] = resolve_adapter(entry)
            if hasattr(adapter, "use_workspace"):
                adapter.use_workspace(spec.workspace)
            if preflight and hasattr(adapter, "preflight"):
                adapter.preflight()
        except (UnknownPlugin, KeyError, ValueError) as exc:
            raise SpecError(str(exc.args[0] if exc.args else exc), field=f"adapters[{i}]",
                            **where("adapters", i)) from None
    if judge is None and spec.judge is not None:
        try:
            judge = resolve_judge(spec.judge)
        except (UnknownPlugin, KeyError, ValueError) as exc:
            raise SpecError(str(exc.args[0] if exc.args else exc), field="judge.provider",
                            **where("judge", "provider")) from None
    return Engine(resolved, judge if spec.judge is not None else None,
                  spec.judge.pass_score if spec.judge else None, cache)


__all__ = ["Adapter", "CallableAdapter", "CallableJudge", "Completion", "Engine", "Judge", "JudgeResult",
           "MockAdapter", "ResponseCache", "build_engine", "register_adapter", "register_judge"]
