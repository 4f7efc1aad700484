"""Which environment variables a spec may name as its key, and where that key may be sent.

A shared farm runs other people's specs: ``api_key_env: WORKER_DB_PASSWORD`` with ``base_url``
pointing anywhere would make a worker send its database password as a bearer token. So a key is
read only from a variable named in ``EVALFARM_KEY_ENV_ALLOW`` (comma-separated; default: the names
evalfarm documents) and, when ``EVALFARM_ENDPOINT_ALLOW`` is set (comma-separated host patterns,
``*.example.com``, ``127.0.0.1``), only for endpoints whose host matches. A refusal is a per-item
configuration error that names the variable to set; a key is never silently dropped.
"""
from __future__ import annotations

import fnmatch
import os
from urllib.parse import urlsplit

from .errors import ProviderError

DEFAULT_KEY_ENVS = ("EVAL_API_KEY", "EVAL_JUDGE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
                    "GOOGLE_API_KEY", "OPENROUTER_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "TOGETHER_API_KEY",
                    "DEEPSEEK_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_API_KEY", "VERTEX_API_KEY", "XAI_API_KEY",
                    "PERPLEXITY_API_KEY", "HYPERBOLIC_API_KEY", "FIREWORKS_API_KEY", "CEREBRAS_API_KEY",
                    "AWS_BEARER_TOKEN_BEDROCK", "NSCALE_SERVICE_TOKEN", "COMETAPI_KEY", "AIML_API_KEY",
                    "HELICONE_API_KEY", "VERCEL_AI_GATEWAY_API_KEY", "DOCKER_MODEL_RUNNER_API_KEY",
                    "TRUEFOUNDRY_API_KEY", "REPLICATE_API_TOKEN")
# Not in the default: tokens that open more than a model API (GITHUB_TOKEN, HF_TOKEN, DATABRICKS_TOKEN,
# CLOUDFLARE_API_KEY); a host that wants them allows them by name.


class KeyRefused(ProviderError):
    """The spec names a key variable (or an endpoint) this host does not allow: not retried."""


def _names(var: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    raw = os.environ.get(var)
    if raw is None:
        return default
    return tuple(n.strip() for n in raw.split(",") if n.strip())


def key_for(api_key_env: str, url: str) -> str | None:
    """The key to send to ``url``, from ``api_key_env`` if this host allows both; None when unset."""
    allowed = _names("EVALFARM_KEY_ENV_ALLOW", DEFAULT_KEY_ENVS)
    if api_key_env not in allowed:
        raise KeyRefused(f"api_key_env {api_key_env} is refused on this host: to use it, add {api_key_env} to "
                         "EVALFARM_KEY_ENV_ALLOW where the calls run (the workers, or this process); allowed now: "
                         f"{', '.join(allowed) or 'none'}")
    hosts = _names("EVALFARM_ENDPOINT_ALLOW")
    if hosts:
        host = (urlsplit(url).hostname or "").lower()
        if not any(fnmatch.fnmatch(host, pattern.lower()) for pattern in hosts):
            raise KeyRefused(f"endpoint host {host or url!r} is not in EVALFARM_ENDPOINT_ALLOW "
                             f"({', '.join(hosts)}): the key in {api_key_env} is not sent there; add the host's "
                             "pattern to EVALFARM_ENDPOINT_ALLOW to call it")
    return os.environ.get(api_key_env) or None
