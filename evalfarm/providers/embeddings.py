"""Embeddings for the ``similar`` check: OpenAI's ``POST {base_url}/embeddings`` (``input``: the output and
the expected text; ``Authorization: Bearer`` from ``api_key_env``), cosine of the two vectors.

The endpoint is the check's ``embeddings.base_url``, else ``EVAL_EMBEDDINGS_BASE_URL``, else OpenAI's
(promptfoo's default embedding provider is OpenAI's text-embedding-3-large). ``mock-provider`` answers it
deterministically (mock/native.py: word overlap)."""
from __future__ import annotations

import json
import math
import os
from typing import Any

from ..redact import register_secret_env
from .errors import BadResponse
from .openai import Endpoint, _post_once
from .retry import RetryPolicy, with_retries
from .wire import Wire, bad

OPENAI_URL = "https://api.openai.com/v1"


class EmbeddingsWire(Wire):
    kind = "embeddings"

    def url(self, ep: Any) -> str:
        base = ep.base_url.rstrip("/")
        return base if base.endswith("/embeddings") else base + "/embeddings"


EMBEDDINGS = EmbeddingsWire()


def cosine(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not a:
        raise BadResponse(f"embeddings of different sizes ({len(a)}, {len(b)})", 200)
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return 0.0 if not na or not nb else sum(x * y for x, y in zip(a, b)) / (na * nb)


async def similarity(check: Any, output: str) -> float:
    """The cosine similarity of ``output`` and ``check.value`` under ``check.embeddings``."""
    spec = check.embeddings
    base = spec.base_url or os.environ.get("EVAL_EMBEDDINGS_BASE_URL") or OPENAI_URL
    register_secret_env(spec.api_key_env)
    ep = Endpoint(base, spec.model, spec.api_key_env, wire=EMBEDDINGS)
    body = json.dumps({"model": spec.model, "input": [output or " ", check.value]}).encode()
    data = await with_retries(lambda: _post_once(ep, body), RetryPolicy())
    try:
        rows = sorted(data["data"], key=lambda r: r["index"])
        vectors = [[float(x) for x in r["embedding"]] for r in rows]
    except (KeyError, TypeError, ValueError):
        raise bad("not an embeddings answer", data) from None
    if len(vectors) != 2:
        raise bad("expected 2 embeddings", data)
    return round(cosine(vectors[0], vectors[1]), 6)


async def similarities(checks: list[Any], output: str) -> dict[int, float]:
    """Every ``similar`` check's cosine, by its index in the prompt's checks."""
    return {i: await similarity(c, output) for i, c in enumerate(checks) if c.kind == "similar"}
