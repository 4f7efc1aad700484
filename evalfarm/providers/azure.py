"""Azure OpenAI (``provider: azure``): the OpenAI chat body at
``{base_url}/chat/completions?api-version=V``, where ``base_url`` is the deployment's URL
(``https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT``) and ``api_version`` is
required; the key travels in the ``api-key`` header (not ``Authorization``)."""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .openai import OpenAIAdapter
from .wire import Wire


class AzureWire(Wire):
    kind = "azure"

    def check(self, spec: Any) -> None:
        if not spec.api_version:
            raise KeyError(f"adapter {spec.id!r}: provider azure needs api_version (e.g. 2024-10-21)")

    def url(self, ep: Any) -> str:
        return f"{super().url(ep)}?api-version={quote(ep.api_version or '', safe='-.')}"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        return {"api-key": key} if key else {}


class AzureAdapter(OpenAIAdapter):
    wire = AzureWire()
