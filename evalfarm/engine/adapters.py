"""The adapter contract: a model under test turns a prompt into a ``Completion``.

``Adapter`` is the one interface every model under test implements (OpenAI-compatible
endpoints, coding agents, plug-ins); ``MockAdapter`` (``mock``, ``mock:<name>``) is a
real, deterministic, offline implementation of it, not a patch.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..spec.models import AdapterSpec, PromptSpec


@dataclass
class Completion:
    """What one call produced. ``finish_reason`` "length" means truncated."""

    text: str
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


class Adapter(Protocol):
    """Built by a factory from the spec's adapter entry (an id string or an ``AdapterSpec``)."""

    id: str

    def config(self) -> dict[str, Any]:
        """What determines this adapter's output (hashed into item keys): no secrets."""

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        """One call. Raise on a provider failure (it becomes a runtime error, never quality)."""


class MockAdapter:
    """Deterministic echo: ``[<adapter>] <prompt text>``."""

    def __init__(self, entry: "str | AdapterSpec") -> None:
        self.id = entry if isinstance(entry, str) else entry.id

    def config(self) -> dict[str, Any]:
        return {"kind": "mock", "id": self.id, "version": 1}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        text = f"[{self.id}] {prompt.text}"
        return Completion(text=text, input_tokens=len(prompt.text.split()), output_tokens=len(text.split()))


class EchoAdapter:
    """``provider: echo``: the answer is the prompt itself, as promptfoo's ``echo`` provider (a config that
    tests its prompts, test files or assertions, with no model)."""

    def __init__(self, entry: "str | AdapterSpec") -> None:
        self.id = entry if isinstance(entry, str) else entry.id

    def config(self) -> dict[str, Any]:
        return {"kind": "echo", "version": 1}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        return Completion(text=prompt.text)


class CallableAdapter:
    """Wraps a plain synchronous ``executor(adapter_id, prompt) -> str`` (the Python API)."""

    def __init__(self, adapter_id: str, executor: Callable[[str, PromptSpec], str]) -> None:
        self.id, self._executor = adapter_id, executor

    def config(self) -> dict[str, Any]:
        return {"kind": "callable", "id": self.id}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        text = await asyncio.to_thread(self._executor, self.id, prompt)
        return Completion(text=str(text))
