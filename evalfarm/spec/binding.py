"""Endpoints filled from flags and the environment: a new spec, before it is stored or sent.

``--base-url`` wins, then the spec, then ``EVAL_BASE_URL``. The judge: ``--judge-base-url``,
the spec, ``EVAL_JUDGE_BASE_URL``, ``--base-url``, the first adapter's endpoint, then
``EVAL_BASE_URL``. Keys stay in the environment: only variable names travel; a judge whose
``EVAL_JUDGE_API_KEY`` is unset uses ``EVAL_API_KEY``.
"""
from __future__ import annotations

import os
from typing import Any

from ..errors import SpecError
from .models import AdapterSpec, EvalSpec, check_base_url


def bind_environment(spec: EvalSpec, base_url: str | None = None, judge_base_url: str | None = None) -> EvalSpec:
    env_url = os.environ.get("EVAL_BASE_URL") or None
    for source, url in (("--base-url", base_url), ("--judge-base-url", judge_base_url), ("EVAL_BASE_URL", env_url),
                        ("EVAL_JUDGE_BASE_URL", os.environ.get("EVAL_JUDGE_BASE_URL") or None)):
        try:
            check_base_url(url)
        except ValueError as exc:
            raise SpecError(str(exc), field=source) from None
    adapters = [a.model_copy(update={"base_url": base_url or a.base_url or env_url}) if isinstance(a, AdapterSpec)
                else a for a in spec.adapters]
    updates: dict[str, Any] = {"adapters": adapters}
    if spec.judge is not None and spec.judge.provider != "mock":
        first = next((a.base_url for a in adapters if isinstance(a, AdapterSpec) and a.base_url), None)
        jurl = judge_base_url or spec.judge.base_url or os.environ.get("EVAL_JUDGE_BASE_URL") or base_url \
            or first or env_url
        key_env = spec.judge.api_key_env
        if key_env == "EVAL_JUDGE_API_KEY" and not os.environ.get(key_env) and os.environ.get("EVAL_API_KEY"):
            key_env = "EVAL_API_KEY"
        updates["judge"] = spec.judge.model_copy(update={"base_url": jurl, "api_key_env": key_env})
    return spec.model_copy(update=updates)
