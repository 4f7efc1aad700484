"""Where adapters and judges come from: built-ins in a lazy table, plug-ins by entry point.

A name maps to a factory path (``module:attribute``) imported only when that name is
used, so this module imports no plug-in (no import cycle is possible) and a run that
never names ``openai`` never imports httpx. Plug-ins use the ecosystem's convention,
Python entry points in the groups ``evalfarm.adapters`` and ``evalfarm.judges`` (the A/B
harness registers its offline adapters that way), loaded once, on the first name the
tables do not know. ``EVALFARM_PLUGINS`` (modules calling ``register_adapter`` /
``register_judge`` when imported) keeps working; the coordinator and every worker must
see the same plug-ins.

An adapter entry is a spec's ``adapters:`` item: an id string (its name is the part before
``:``, as in ``mock:other``) or an ``AdapterSpec`` object (its name is ``provider``). The
factory receives the entry itself.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable

from ..spec.models import AdapterSpec, JudgeSpec
from .adapters import Adapter
from .judges import Judge

Factory = Callable[[Any], Any]

_BUILTIN_ADAPTERS: dict[str, str] = {
    "mock": "evalfarm.engine.adapters:MockAdapter",
    "echo": "evalfarm.engine.adapters:EchoAdapter",
    "openai": "evalfarm.providers.openai:OpenAIAdapter",
    "anthropic": "evalfarm.providers.anthropic:AnthropicAdapter",  # native wire protocols, one module each
    "gemini": "evalfarm.providers.gemini:GeminiAdapter",
    "vertex": "evalfarm.providers.gemini:VertexAdapter",
    "openai-responses": "evalfarm.providers.responses:ResponsesAdapter",
    "azure": "evalfarm.providers.azure:AzureAdapter",
    "http": "evalfarm.providers.http_json:HttpJsonAdapter",
    "bedrock": "evalfarm.providers.bedrock:BedrockAdapter",
    "replicate": "evalfarm.providers.replicate:ReplicateAdapter",
    "agent": "evalfarm.agents.adapter:AgentAdapter",  # coding agents in git worktrees (spawn mode)
    "stored": "evalfarm.engine.stored:StoredAdapter",  # a re-scoring run's stand-in: never called
}
_BUILTIN_JUDGES: dict[str, str] = {
    "mock": "evalfarm.engine.judges:MockJudge",
    "openai": "evalfarm.providers.openai:openai_judge",
    "anthropic": "evalfarm.providers.anthropic:anthropic_judge",  # the native wires (azure and http need
    "gemini": "evalfarm.providers.gemini:gemini_judge",           # fields a judge block does not have)
    "vertex": "evalfarm.providers.gemini:vertex_judge",
    "openai-responses": "evalfarm.providers.responses:responses_judge",
    "bedrock": "evalfarm.providers.bedrock:bedrock_judge",
}
GROUPS = {"adapter": "evalfarm.adapters", "judge": "evalfarm.judges"}


class UnknownPlugin(LookupError):
    """No adapter or judge of that name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


class _Table:
    def __init__(self, kind: str, builtins: dict[str, str]) -> None:
        self.kind, self.builtins = kind, builtins
        self.registered: dict[str, Factory] = {}
        self.entry_points: dict[str, Any] | None = None  # loaded once, on the first unknown name

    def _entry_points(self) -> dict[str, Any]:
        if self.entry_points is None:
            from importlib.metadata import entry_points

            self.entry_points = {ep.name: ep for ep in entry_points(group=GROUPS[self.kind])}
        return self.entry_points

    def factory(self, name: str) -> Factory:
        if name in self.registered:
            return self.registered[name]
        path = self.builtins.get(name)
        if path is not None:
            module, _, attr = path.partition(":")
            return getattr(importlib.import_module(module), attr)
        ep = self._entry_points().get(name)
        if ep is not None:
            try:
                return ep.load()
            except Exception as exc:  # a broken plug-in is the plug-in's fault: say whose, in one line
                raise UnknownPlugin(f"{self.kind} {name!r}: its plug-in ({ep.value}) failed to load: "
                                    f"{type(exc).__name__}: {exc}") from None
        raise UnknownPlugin(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")

    def names(self) -> list[str]:
        return sorted({*self.registered, *self.builtins, *self._entry_points()})


ADAPTERS = _Table("adapter", _BUILTIN_ADAPTERS)
JUDGES = _Table("judge", _BUILTIN_JUDGES)


def register_adapter(name: str, factory: Factory) -> None:
    """Make ``name`` and ``name:<anything>`` adapter ids (and ``provider: name`` objects) use ``factory``."""
    ADAPTERS.registered[name] = factory


def register_judge(name: str, factory: Callable[[JudgeSpec], Judge]) -> None:
    """Make a judge block with ``provider: name`` use ``factory``."""
    JUDGES.registered[name] = factory


def adapter_name(entry: "str | AdapterSpec") -> str:
    return entry.split(":", 1)[0] if isinstance(entry, str) else entry.provider


def resolve_adapter(entry: "str | AdapterSpec") -> Adapter:
    """An adapter id or an AdapterSpec -> an Adapter; UnknownPlugin names what is known."""
    if isinstance(entry, str) and entry in ADAPTERS.registered:  # a plug-in may register a full id
        return ADAPTERS.registered[entry](entry)
    return ADAPTERS.factory(adapter_name(entry))(entry)


def resolve_judge(spec: JudgeSpec) -> Judge:
    return JUDGES.factory(spec.provider)(spec)


def load_plugins() -> None:
    """Import the modules named in EVALFARM_PLUGINS (comma-separated): they register adapters and
    judges. The coordinator and every worker must load the same plug-ins."""
    for name in filter(None, (m.strip() for m in os.environ.get("EVALFARM_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError:
            raise
        except Exception as exc:  # the plug-in's own error (syntax, a failing import-time check)
            where = f" ({exc.filename}:{exc.lineno})" if isinstance(exc, SyntaxError) else ""
            raise ImportError(f"{type(exc).__name__}{where}: {exc}", name=name) from None


# Built-in services the engine calls by name, like the adapters above: the table names where they live
# (a provider's module, one floor up) and the engine imports it on first use only.
_BUILTIN_SERVICES: dict[str, str] = {
    "similarities": "evalfarm.providers.embeddings:similarities",
}


def _service(name: str) -> Any:
    module, attr = _BUILTIN_SERVICES[name].split(":")
    return getattr(importlib.import_module(module), attr)


async def similarities(checks: list[Any], output: str) -> dict[int, float]:
    """The ``similar`` checks' cosines from an embeddings endpoint (a spec without such a check never
    imports the client)."""
    return await _service("similarities")(checks, output)
