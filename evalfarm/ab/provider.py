"""The provider executor: the arms run against a real OpenAI-compatible model.

Each arm's addendum is the prompt's ``system`` text, which the ``openai`` provider sends
as the system message; tokens come from the responses' ``usage`` and cost from the price
given with ``--price IN,OUT`` (USD per million tokens). Without a price, cost is
``not_measured`` and the comparison is ``incomparable`` (never a partial winner). Rows go
to the production spend ledger by default and carry the farm run id and a timestamp:
real spend is never deduplicated.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import UsageError
from ..spec.models import AdapterSpec, Price
from ..runs.state import StateDir
from .executors import _RowWriter

ADAPTER_ID = "ab-provider"


def _public(url: str) -> str:
    """The URL without credentials (never written to artifacts)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class ProviderExecutor(_RowWriter):
    kind = "provider"
    deterministic = False

    def __init__(self, model: str | None, base_url: str | None, api_key_env: str | None = None,
                 price: tuple[float, float] | None = None) -> None:
        if not model:
            raise UsageError("--executor provider needs --model NAME (the model the endpoint serves)")
        base_url = base_url or os.environ.get("EVAL_BASE_URL")
        if not base_url:
            raise UsageError("--executor provider needs --base-url URL (or EVAL_BASE_URL), "
                             "e.g. http://127.0.0.1:8000/v1")
        if not urlsplit(base_url).scheme.startswith("http"):
            raise UsageError(f"--base-url {_public(base_url)!r}: expected an http(s):// URL")
        try:
            self.spec = AdapterSpec(id=ADAPTER_ID, provider="openai", model=model, base_url=base_url,
                                    api_key_env=api_key_env or "EVAL_API_KEY",
                                    price=Price(input=price[0], output=price[1]) if price else None)
        except ValueError as exc:
            raise UsageError(f"--executor provider: {str(exc).splitlines()[-1].strip()}") from None
        self.model, self.price = model, price

    def adapter(self) -> Any:
        return self.spec

    def cost_known(self) -> bool:
        return self.price is not None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "adapter": ADAPTER_ID, "provider": "openai", "model": self.model,
                "base_url": _public(self.spec.base_url or ""),
                "price_usd_per_mtok": ({"input_per_mtok": self.price[0], "output_per_mtok": self.price[1]}
                                       if self.price else None)}

    def default_ledger(self) -> Path:
        return StateDir.of().cost_ledger
