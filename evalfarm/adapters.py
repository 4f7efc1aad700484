"""Adapter registry: an adapter id -> how to call it.

An adapter turns a prompt into a ``Completion``. Providers plug in with
``register_adapter(prefix, factory)``; the built-in ``mock`` (and ``mock:<name>``)
is deterministic and offline.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .spec import PromptSpec


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
    id: str

    def config(self) -> dict[str, Any]:
        """What determines this adapter's output (hashed into item keys)."""

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion: ...


class MockAdapter:
    """Deterministic echo: ``[<adapter>] <prompt text>``."""

    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id

    def config(self) -> dict[str, Any]:
        return {"kind": "mock", "id": self.id, "version": 1}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        text = f"[{self.id}] {prompt.text}"
        return Completion(text=text, input_tokens=len(prompt.text.split()), output_tokens=len(text.split()))


class CallableAdapter:
    """Wraps a plain synchronous ``executor(adapter_id, prompt) -> str`` (the Python API)."""

    def __init__(self, adapter_id: str, executor: Callable[[str, PromptSpec], str]) -> None:
        self.id, self._executor = adapter_id, executor

    def config(self) -> dict[str, Any]:
        return {"kind": "callable", "id": self.id}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        text = await asyncio.to_thread(self._executor, self.id, prompt)
        return Completion(text=str(text))


AdapterFactory = Callable[[str], Adapter]
_REGISTRY: dict[str, AdapterFactory] = {"mock": MockAdapter}


def register_adapter(prefix: str, factory: AdapterFactory) -> None:
    """Make ``prefix`` and ``prefix:<name>`` ids resolve through ``factory``."""
    _REGISTRY[prefix] = factory


def registered() -> list[str]:
    return sorted(_REGISTRY)


_PROVIDERS: dict[str, Callable[[Any], Adapter]] = {}


def register_provider(name: str, factory: Callable[[Any], Adapter]) -> None:
    """Adapter objects in a spec (``provider: NAME``) are built by ``factory(AdapterSpec)``."""
    _PROVIDERS[name] = factory


def resolve_adapter(entry: "str | Any") -> Adapter:
    """An adapter id or an AdapterSpec -> an Adapter; KeyError names what is known."""
    if not isinstance(entry, str):
        if not _PROVIDERS:
            from . import providers  # noqa: F401  (registers the built-in providers)
        factory = _PROVIDERS.get(entry.provider)
        if factory is None:
            raise KeyError(f"unknown provider {entry.provider!r}; available: {', '.join(sorted(_PROVIDERS))}")
        return factory(entry)
    adapter_id = entry
    prefix = adapter_id.split(":", 1)[0]
    if prefix.startswith("ab-") and prefix not in _REGISTRY:
        from .ab import executors  # noqa: F401  (registers the A/B harness's ab-echo / ab-synthetic)
    factory = _REGISTRY.get(adapter_id) or _REGISTRY.get(prefix)
    if factory is None:
        raise KeyError(f"unknown adapter {adapter_id!r}; registered adapters: {', '.join(registered())} "
                       f"(use 'mock' or 'mock:<name>' offline)")
    return factory(adapter_id)


