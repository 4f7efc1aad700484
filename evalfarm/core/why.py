"""Why items errored, said so a person can act: one example per error class and what to check.

A run where nothing was measured because a key variable is unset used to say only
"runtime_error 1". The aggregate keeps the first message of each error class per adapter,
and this module names the likely cause with the adapter's own settings (the key variable's
name, the endpoint), never a secret.
"""
from __future__ import annotations

from typing import Any

from ..spec.models import AdapterSpec, EvalSpec


def _endpoint(spec: EvalSpec, adapter: str, stage: str) -> tuple[str | None, str | None]:
    """(key variable, base URL) of the adapter, or of the judge for a judge-stage error."""
    if stage == "judge" and spec.judge is not None:
        return spec.judge.api_key_env, spec.judge.base_url
    entry = next((a for a in spec.adapters if isinstance(a, AdapterSpec) and a.id == adapter), None)
    return (entry.api_key_env, entry.base_url) if entry is not None else (None, None)


def hint(spec: EvalSpec, adapter: str, error: dict[str, Any]) -> str | None:
    """What to check for this error, or None when the message says it all."""
    cls, stage, status = error.get("class"), error.get("stage") or "adapter", error.get("status")
    key_env, url = _endpoint(spec, adapter, stage)
    where = f" for {url}" if url else ""
    if cls == "AuthError":
        return (f"the endpoint refused the key{where}: is {key_env or 'the key variable'} set, and valid, where "
                "the calls run (this process, or the workers' environment)?")
    if cls == "TransportError":
        return f"no answer{where}: is the server up and reachable from where the calls run?"
    if cls == "QuotaExhausted":
        return (f"the account's quota is exhausted{where} (HTTP 429 insufficient_quota): not retried; the endpoint "
                "was paused for the whole fleet and the remaining calls were not sent: top up the account, then "
                "run again")
    if cls == "RateLimited":
        return "the endpoint kept answering 429 after the retries: set max_in_flight or requests_per_minute"
    if cls == "ServerError":
        return f"the endpoint kept failing with HTTP {status or '5xx'}{where}: look at the server"
    if cls == "ClientError":
        return f"the endpoint rejected the request (HTTP {status or '4xx'}){where}: check the model name and params"
    if cls == "BadResponse":
        return f"the answers{where} are not OpenAI chat completions: check base_url (does it end in /v1?)"
    if cls == "DeadlineExceeded":
        return "items ran past the task's time limit: raise EVALFARM_TASK_TIME_LIMIT or the endpoint's timeout_s"
    if cls == "JudgeError":
        return "the judge's replies could not be read as verdicts: try another judge model"
    return None


class ErrorExamples:
    """The first message of each (adapter, error class), with its count and hint."""

    def __init__(self, spec: EvalSpec) -> None:
        self.spec = spec
        self.seen: dict[str, dict[str, dict[str, Any]]] = {}

    def add(self, outcome: dict[str, Any]) -> None:
        error = outcome.get("error")
        if not isinstance(error, dict):
            return
        per = self.seen.setdefault(outcome["adapter"], {})
        cls = str(error.get("class") or "Error")
        entry = per.get(cls)
        if entry is None:
            per[cls] = {"count": 1, "stage": error.get("stage"), "example": str(error.get("message") or "")[:400],
                        "hint": hint(self.spec, outcome["adapter"], error)}
        else:
            entry["count"] += 1

    def of(self, adapter: str) -> dict[str, dict[str, Any]]:
        """The adapter's error classes, most frequent first."""
        per = self.seen.get(adapter, {})
        return dict(sorted(per.items(), key=lambda kv: -kv[1]["count"]))
