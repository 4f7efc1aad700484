"""Judges: score an output in [0, 1]. The ``mock`` judge is deterministic and offline."""
from __future__ import annotations

import asyncio
import re
from typing import Any, Callable, Protocol

from .spec import JudgeSpec, PromptSpec

_WORD = re.compile(r"[a-z0-9]+")


def clamp01(value: float) -> float:
    """Scores outside [0, 1] are clamped, never trusted as-is."""
    value = float(value)
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, value))


class Judge(Protocol):
    def config(self) -> dict[str, Any]: ...

    async def score(self, prompt: PromptSpec, output: str) -> float: ...


class MockJudge:
    """Fraction of the prompt's words that appear in the output: deterministic, not constant."""

    def __init__(self, spec: JudgeSpec) -> None:
        self.spec = spec

    def config(self) -> dict[str, Any]:
        return {"kind": "mock", **self.spec.model_dump()}

    async def score(self, prompt: PromptSpec, output: str) -> float:
        words = set(_WORD.findall(prompt.text.lower()))
        if not words:
            return 1.0
        found = set(_WORD.findall(output.lower()))
        return clamp01(len(words & found) / len(words))


class CallableJudge:
    """Wraps a plain synchronous ``judge(judge_spec, prompt, output) -> float``."""

    def __init__(self, spec: JudgeSpec, fn: Callable[[JudgeSpec, PromptSpec, str], float]) -> None:
        self.spec, self._fn = spec, fn

    def config(self) -> dict[str, Any]:
        return {"kind": "callable", **self.spec.model_dump()}

    async def score(self, prompt: PromptSpec, output: str) -> float:
        return clamp01(await asyncio.to_thread(self._fn, self.spec, prompt, output))


_REGISTRY: dict[str, Callable[[JudgeSpec], Judge]] = {"mock": MockJudge}


def register_judge(provider: str, factory: Callable[[JudgeSpec], Judge]) -> None:
    _REGISTRY[provider] = factory


def resolve_judge(spec: JudgeSpec) -> Judge:
    factory = _REGISTRY.get(spec.provider)
    if factory is None:
        raise KeyError(f"judge provider {spec.provider!r} is not available; available: "
                       f"{', '.join(sorted(_REGISTRY))}")
    return factory(spec)
