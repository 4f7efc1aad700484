"""Which executor runs an A/B suite's arms: ``--executor synthetic|provider|spawn``."""
from __future__ import annotations

from ..errors import UsageError
from .executors import ArmExecutor, SyntheticExecutor
from .provider import ProviderExecutor
from .spawn import SpawnExecutor


def executor_for(kind: str, *, model: str | None = None, base_url: str | None = None,
                 api_key_env: str | None = None, price: tuple[float, float] | None = None,
                 role: str = "backend", timeout_s: float | None = None, agent: str | None = None) -> ArmExecutor:
    if kind == "synthetic":
        return SyntheticExecutor(model)
    if kind == "provider":
        return ProviderExecutor(model=model, base_url=base_url, api_key_env=api_key_env, price=price)
    if kind == "spawn":
        return SpawnExecutor(agent=agent, model=model, role=role, timeout_s=timeout_s, base_url=base_url,
                             api_key_env=api_key_env, price=price)
    raise UsageError(f"unknown executor {kind!r}; choose synthetic, provider or spawn")
