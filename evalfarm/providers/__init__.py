"""Built-in providers: OpenAI-compatible chat endpoints for adapters and judges."""
from __future__ import annotations

from ..adapters import register_provider
from ..judge import LLMJudge, register_judge
from ..spec import JudgeSpec
from .openai import Endpoint, OpenAIAdapter, chat


def openai_judge(spec: JudgeSpec) -> LLMJudge:
    if not spec.base_url:
        raise KeyError("the judge has no base_url: set judge.base_url, pass --judge-base-url, "
                       "or set EVAL_JUDGE_BASE_URL / EVAL_BASE_URL")
    from ..redact import register_secret_env
    from .limits import Limits

    register_secret_env(spec.api_key_env)

    endpoint = Endpoint(spec.base_url, spec.model, spec.api_key_env, spec.timeout_s, spec.price, dict(spec.params),
                        Limits(spec.max_in_flight, spec.requests_per_minute))
    return LLMJudge(spec, lambda messages: chat(endpoint, messages), kind="openai")


register_provider("openai", OpenAIAdapter)
register_judge("openai", openai_judge)
