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
from .adapters import Adapter, CallableAdapter, Completion, MockAdapter
from .cache import ResponseCache
from .items import Engine
from .judges import CallableJudge, Judge, JudgeResult
from .registry import UnknownPlugin, register_adapter, register_judge, resolve_adapter, resolve_judge

Where = Callable[..., dict[str, Any]]  # loc -> SpecError location keywords (SpecFile.where)


def build_engine(spec: EvalSpec, where: Where | None = None, *, adapters: dict[str, Adapter] | None = None,
                 judge: Judge | None = None, cache: ResponseCache | None = None) -> Engine:
    """The spec's adapters and judge, resolved (or given, for the Python API). An unknown name or
    an adapter missing its endpoint is a SpecError pointing at the spec's line."""
    where = where or (lambda *loc: {})
    resolved: dict[str, Adapter] = {}
    for i, entry in enumerate(spec.adapters):
        adapter_id = entry if isinstance(entry, str) else entry.id
        if adapters is not None:
            resolved[adapter_id] = adapters[adapter_id]
            continue
        try:
            resolved[adapter_id] = resolve_adapter(entry)
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
