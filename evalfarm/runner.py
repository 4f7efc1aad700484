"""In-process runs (the Python API) and the helpers every mode shares.

``Runner(executor=None, judge=None).run(spec, base_dir=...)`` plans, executes,
aggregates and returns a ``RunReport``; no Celery, no Redis.
"""
from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from .adapters import Adapter, CallableAdapter, resolve_adapter
from .engine import PROCESS_LOOP, run_items
from .errors import SpecError
from .judge import CallableJudge, Judge, resolve_judge
from .plan import iter_items
from .report import RunReport, build_report
from .spec import EvalSpec, JudgeSpec, PromptSpec

Executor = Callable[[str, PromptSpec], str]
JudgeFn = Callable[[JudgeSpec, PromptSpec, str], float]


def new_run_id() -> str:
    """Sorts by time (microseconds), unique by a random suffix."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def make_adapters(spec: EvalSpec, executor: Executor | None = None) -> dict[str, Adapter]:
    adapters: dict[str, Adapter] = {}
    for i, entry in enumerate(spec.adapters):
        adapter_id = entry if isinstance(entry, str) else entry.id
        if executor is not None:
            adapters[adapter_id] = CallableAdapter(adapter_id, executor)
            continue
        try:
            adapters[adapter_id] = resolve_adapter(entry)
        except KeyError as exc:
            raise SpecError(exc.args[0], path=str(spec._source) if spec._source else None,
                            line=spec_line(spec, ("adapters", i)), field=f"adapters[{i}]") from None
    return adapters


def make_judge(spec: EvalSpec, judge_fn: JudgeFn | None = None) -> Judge | None:
    if spec.judge is None:
        return None
    if judge_fn is not None:
        return CallableJudge(spec.judge, judge_fn)
    try:
        return resolve_judge(spec.judge)
    except KeyError as exc:
        raise SpecError(exc.args[0], path=str(spec._source) if spec._source else None,
                        line=spec_line(spec, ("judge", "provider")), field="judge.provider") from None


def spec_line(spec: EvalSpec, loc: tuple) -> int | None:
    from .sourcemap import line_for
    lines = getattr(spec, "_lines", None)
    return line_for(lines, loc) if lines else None


class SpecHasher:
    """Hash of the spec without its prompt sources, then every prompt's canonical JSON, streamed."""

    def __init__(self, spec: EvalSpec) -> None:
        import hashlib

        from .canonical import canonical_json

        self._h = hashlib.sha256(canonical_json(spec.model_dump(mode="json",
                                                                exclude={"prompts", "dataset"})).encode())

    def update(self, prompt_json: str) -> None:
        self._h.update(b"\n" + prompt_json.encode())

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def spec_hash(spec: EvalSpec, prompts: Iterable[PromptSpec]) -> str:
    from .plan import prompt_json

    h = SpecHasher(spec)
    for p in prompts:
        h.update(prompt_json(p))
    return h.hexdigest()


def bind_environment(spec: EvalSpec, base_url: str | None = None, judge_base_url: str | None = None) -> EvalSpec:
    """Fill endpoints from flags and the environment before the spec is stored.

    ``--base-url`` wins, then the spec, then EVAL_BASE_URL. The judge: ``--judge-base-url``,
    the spec, EVAL_JUDGE_BASE_URL, then the model's endpoint. Keys stay in the environment:
    only variable names travel; a judge with no EVAL_JUDGE_API_KEY set uses EVAL_API_KEY.
    """
    import os

    from .spec import AdapterSpec

    from .errors import SpecError
    from .spec import check_base_url

    env_url = os.environ.get("EVAL_BASE_URL") or None
    for source, url in (("--base-url", base_url), ("--judge-base-url", judge_base_url), ("EVAL_BASE_URL", env_url),
                        ("EVAL_JUDGE_BASE_URL", os.environ.get("EVAL_JUDGE_BASE_URL") or None)):
        try:
            check_base_url(url)
        except ValueError as exc:
            raise SpecError(str(exc), field=source) from None
    adapters = []
    for a in spec.adapters:
        if isinstance(a, AdapterSpec):
            a = a.model_copy(update={"base_url": base_url or a.base_url or env_url})
        adapters.append(a)
    updates: dict[str, Any] = {"adapters": adapters}
    if spec.judge is not None and spec.judge.provider != "mock":
        first = next((a.base_url for a in adapters if isinstance(a, AdapterSpec) and a.base_url), None)
        jurl = judge_base_url or spec.judge.base_url or os.environ.get("EVAL_JUDGE_BASE_URL") or base_url \
            or first or env_url
        key_env = spec.judge.api_key_env
        if key_env == "EVAL_JUDGE_API_KEY" and not os.environ.get(key_env) and os.environ.get("EVAL_API_KEY"):
            key_env = "EVAL_API_KEY"
        updates["judge"] = spec.judge.model_copy(update={"base_url": jurl, "api_key_env": key_env})
    bound = spec.model_copy(update=updates)
    bound._source, bound._resolved, bound._lines = spec._source, spec._resolved, spec._lines
    bound._stream, bound._count = spec._stream, spec._count
    return bound


def spec_from_cases(paths: list[Path], model: str, judge_model: str | None = None,
                    name: str | None = None) -> EvalSpec:
    """The seed's `run --dataset cases.yaml --model M`: one OpenAI-compatible adapter and,
    when any case has criteria, a judge (``--judge-model``, default the model itself)."""
    from .cases import load_cases
    from .spec import AdapterSpec, JudgeSpec, _check_duplicates

    origins = load_cases(paths)
    _check_duplicates(origins)
    prompts = [p for p, _, _ in origins]
    judge = JudgeSpec(model=judge_model or model) if any(p.criteria for p in prompts) else None
    spec = EvalSpec(name=name or "+".join(p.stem for p in paths), adapters=[AdapterSpec(id=model, model=model)],
                    prompts=prompts, judge=judge)
    spec._resolved = prompts
    return spec


class Runner:
    """Runs a spec in this process. ``executor``/``judge`` are plain sync callables."""

    def __init__(self, executor: Executor | None = None, judge: JudgeFn | None = None,
                 max_in_flight: int = 64) -> None:
        self.executor, self.judge_fn, self.max_in_flight = executor, judge, max_in_flight

    def run(self, spec: EvalSpec, base_dir: Path | str | None = None, *, trials: int | None = None,
            run_id: str | None = None) -> RunReport:
        prompts = spec.resolved_prompts(Path(base_dir) if base_dir else None)
        if self.executor is None:
            spec = bind_environment(spec)
        adapters = make_adapters(spec, self.executor)
        judge = make_judge(spec, self.judge_fn)
        n_trials = trials or spec.trials
        judge_cfg = judge.config() if judge else None
        items = list(iter_items(spec, prompts, {a: ad.config() for a, ad in adapters.items()},
                                judge_cfg, n_trials))
        started, t0 = utc_now(), time.perf_counter()
        pass_score = spec.judge.pass_score if spec.judge else None
        outcomes = PROCESS_LOOP.run(lambda: run_items(items, adapters, judge, self.max_in_flight, pass_score))
        return build_report(run_id=run_id or new_run_id(), spec=spec, spec_hash=spec_hash(spec, prompts),
                            mode="in-process", trials=n_trials, outcomes=[o.to_dict() for o in outcomes],
                            started_at=started, finished_at=utc_now(), duration_s=time.perf_counter() - t0)
