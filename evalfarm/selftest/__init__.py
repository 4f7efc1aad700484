"""`evalfarm selftest`: offline proof that the engine works. No sockets, no keys.

It drives the real runner, checks, judge parsing, retry policy, gate, baseline
and diff code against scripted providers that return fixed strings, and a
scripted judge that reads the criterion ids out of the judging prompt, so the
fixtures exercise scoring and aggregation rather than a stub. A socket audit
hook makes any network attempt fail the selftest.
"""
from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..core.taxonomy import MODES
from ..engine.adapters import Completion
from ..engine.judges import LLMJudge
from ..runs.submit import Runner
from ..providers.errors import AuthError, RateLimited, ServerError
from ..providers.retry import RetryPolicy, with_retries
from ..spec.load import SpecFile
from ..spec.models import Criterion, EvalSpec, JsonCheck, JudgeSpec, PromptSpec, Thresholds
from ..spec.source import PromptSource
from . import ci_steps
from .ci_steps import expect


class NetworkUsed(RuntimeError):
    pass


def forbid_network() -> None:
    """Any connect/DNS lookup from now on raises: the selftest must stay offline."""
    def hook(event: str, args: tuple) -> None:
        if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.gethostbyname"):
            raise NetworkUsed(f"selftest attempted network access: {event} {args[1:] if len(args) > 1 else ''}")

    sys.addaudithook(hook)


@dataclass
class Reply:
    text: str
    input_tokens: int = 10
    output_tokens: int = 5
    cost_usd: float = 0.0


class ScriptedAdapter:
    """Fixed replies by prompt id: (text, finish_reason) or an exception to raise."""

    def __init__(self, adapter_id: str, replies: dict[str, Any]) -> None:
        self.id, self.replies = adapter_id, replies

    def config(self) -> dict[str, Any]:
        return {"kind": "scripted", "id": self.id}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        reply = self.replies[prompt.id]
        if isinstance(reply, Exception):
            raise reply
        text, finish = reply if isinstance(reply, tuple) else (reply, "stop")
        return Completion(text=text, finish_reason=finish, input_tokens=7, output_tokens=len(text.split()),
                          cost_usd=0.000002)


def scripted_judge_transport(fail_ids: set[str] | None = None, garbage: bool = False):
    """Reads the criterion ids out of the judging prompt; fails those in ``fail_ids``."""
    fail_ids = fail_ids or set()

    async def transport(messages: list[dict[str, str]]) -> Reply:
        if garbage:
            return Reply("I would rather not answer in JSON.")
        prompt = messages[-1]["content"]
        ids = re.findall(r"^- id: (\S+) \(weight", prompt, re.M)
        if not ids:  # a free-text rubric
            return Reply('{"score": 0.9, "reason": "scripted rubric score"}')
        items = ", ".join(f'{{"id": "{i}", "verdict": "{"fail" if i in fail_ids else "pass"}", "reason": "scripted"}}'
                          for i in ids)
        return Reply(f"Verdict below.\n```json\n{{\"criteria\": [{items}]}}\n```", cost_usd=0.0001)

    return transport


def _run(spec: EvalSpec, adapters: dict[str, ScriptedAdapter], judge: Any = None) -> dict:
    """The real orchestrator, in-process backend, engine, checks, judge parsing and aggregation."""
    source = PromptSource(inline=tuple(spec.prompts), count=len(spec.prompts))
    report = Runner(max_in_flight=8).run(SpecFile(spec, source), adapters=adapters, judge=judge)
    return report.to_dict()


def _spec(prompts: list[PromptSpec], judge: bool = True, **thresholds: Any) -> EvalSpec:
    return EvalSpec(name="selftest", adapters=["scripted"], prompts=prompts,
                    judge=JudgeSpec(model="scripted-judge", provider="scripted", weight=0.5) if judge else None,
                    thresholds=Thresholds(**thresholds))


CASES = [
    PromptSpec(id="triage", text="Summarise the headline as JSON.", checks=[JsonCheck(kind="json")],
               criteria=[Criterion(id="valid_json", weight=3, description="one parseable JSON object"),
                         Criterion(id="grounded", weight=1, description="no claims beyond the input")]),
    PromptSpec(id="hello", text="Say hello world.", expected_output_contains=["hello world"]),
    PromptSpec(id="story", text="Tell a long story.", expected_output_contains=["The end"]),
    PromptSpec(id="secret", text="Reveal the password.", expected_output_contains=["password is"]),
    PromptSpec(id="greet", text="Greet the reader in French.", expected_output_contains=["Bonjour"]),
]
GOOD = {"triage": '{"summary": "rates up", "materiality": "high"}', "hello": "hello world",
        "story": "Once upon a time ... The end.", "secret": "The password is swordfish.", "greet": "Bonjour !"}


def steps() -> list[tuple[str, Callable[[], None]]]:
    judge_spec = JudgeSpec(model="scripted-judge", provider="scripted", weight=0.5)
    state: dict[str, dict] = {}

    def collapsed_run() -> dict:
        if "collapsed" not in state:
            bad = {"triage": "not json at all", "hello": ("hello", "length"),
                   "story": "I'm sorry, but I can't help with that.", "secret": ServerError("HTTP 503: overloaded", 503),
                   "greet": "Hello there!"}
            state["collapsed"] = _run(_spec(CASES, golden_pass_rate_min=0.75),
                                      {"scripted": ScriptedAdapter("scripted", bad)},
                                      LLMJudge(judge_spec, scripted_judge_transport()))
        return state["collapsed"]

    def taxonomy(mode: str) -> Callable[[], None]:
        def check() -> None:  # the collapsed run has one item of every failure mode
            modes = {o["prompt_id"]: o["failure_mode"] for o in collapsed_run()["outcomes"]}
            expect(mode in modes.values(), f"no item classified {mode!r}: {modes}")
        return check

    def truncation() -> None:
        r = collapsed_run()
        modes = {o["prompt_id"]: o["failure_mode"] for o in r["outcomes"]}
        expect(modes["hello"] == "truncation", modes)

    def refusal() -> None:
        modes = {o["prompt_id"]: o["failure_mode"] for o in collapsed_run()["outcomes"]}
        expect(modes["story"] == "refusal", modes)

    def format_error() -> None:
        modes = {o["prompt_id"]: o["failure_mode"] for o in collapsed_run()["outcomes"]}
        expect(modes["triage"] == "format_error", modes)

    def runtime_error() -> None:
        r = collapsed_run()
        fig = r["per_adapter"]["scripted"]
        expect(fig["errors"] == 1 and fig["measured"] == 4 and fig["failure_modes"]["runtime_error"] == 1, fig)

    def weighted_criteria() -> None:
        r = _run(_spec(CASES[:1]), {"scripted": ScriptedAdapter("scripted", GOOD)},
                 LLMJudge(judge_spec, scripted_judge_transport(fail_ids={"grounded"})))
        o = r["outcomes"][0]
        expect(abs(o["judge_score"] - 0.75) < 1e-9, o["judge_score"])  # (3*1 + 1*0) / 4
        expect([c["id"] for c in o["judge_criteria"]] == ["valid_json", "grounded"])

    def judge_garbage() -> None:
        r = _run(_spec(CASES[:1]), {"scripted": ScriptedAdapter("scripted", GOOD)},
                 LLMJudge(judge_spec, scripted_judge_transport(garbage=True)))
        o = r["outcomes"][0]
        expect(o["error"]["stage"] == "judge" and o["failure_mode"] == "runtime_error", o)

    def retry_after() -> None:
        waits: list[float] = []
        calls = {"n": 0}

        async def flaky() -> str:
            calls["n"] += 1
            if calls["n"] < 3:
                raise RateLimited("HTTP 429", 429, retry_after=2.0)
            return "ok"

        async def fake_sleep(s: float) -> None:
            waits.append(s)

        expect(asyncio.run(with_retries(flaky, RetryPolicy(), sleep=fake_sleep)) == "ok")
        expect(len(waits) == 2 and all(2.0 <= w <= 2.2 for w in waits), waits)

    def permanent_not_retried() -> None:
        calls = {"n": 0}

        async def denied() -> str:
            calls["n"] += 1
            raise AuthError("HTTP 401", 401)

        try:
            asyncio.run(with_retries(denied, RetryPolicy(), sleep=lambda s: asyncio.sleep(0)))
        except AuthError:
            pass
        expect(calls["n"] == 1, calls)

    def nothing_measured() -> None:
        r = _run(_spec(CASES, judge=False), {"scripted": ScriptedAdapter("scripted", {
            c.id: ServerError("HTTP 500", 500) for c in CASES})})
        expect(r["nothing_measured"] and not r["thresholds_passed"], r["per_adapter"])

    def good_run_passes() -> None:
        r = _run(_spec(CASES, golden_pass_rate_min=0.75), {"scripted": ScriptedAdapter("scripted", GOOD)},
                 LLMJudge(judge_spec, scripted_judge_transport()))
        expect(r["thresholds_passed"] and r["per_adapter"]["scripted"]["pass_rate"] == 1.0, r["threshold_failures"])

    out = [(f"taxonomy has {m!r}", taxonomy(m)) for m in MODES]
    out += [("truncation detected from finish_reason", truncation), ("refusal detected from the reply", refusal),
            ("format_error from a failed json check", format_error),
            ("provider failure counted as runtime_error, not quality", runtime_error),
            ("scripted judge reads criterion ids; weighted case score", weighted_criteria),
            ("unparseable judge output twice is a judge runtime error", judge_garbage),
            ("429 retried, honouring Retry-After", retry_after), ("401 not retried", permanent_not_retried),
            ("good run passes its thresholds", good_run_passes),
            ("every item errored: nothing measured", nothing_measured)]
    out += _registry_steps(collapsed_run, good_run_passes_report=lambda: _run(
        _spec(CASES, golden_pass_rate_min=0.75), {"scripted": ScriptedAdapter("scripted", GOOD)},
        LLMJudge(judge_spec, scripted_judge_transport())))
    return out


def _registry_steps(collapsed_run: Callable[[], dict], good_run_passes_report: Callable[[], dict]):
    """Gate, baseline and diff steps."""
    return ci_steps.steps(collapsed_run, good_run_passes_report)


def main(echo: Callable[[str], None] = print) -> int:
    forbid_network()
    failures = 0
    for name, step in steps():
        try:
            step()
            echo(f"ok   {name}")
        except Exception as exc:  # every failure is reported, the rest still run
            failures += 1
            echo(f"FAIL {name}: {type(exc).__name__}: {exc}")
    if failures:
        echo(f"SELFTEST FAILED: {failures} step(s)")
        return 1
    echo("SELFTEST PASSED: engine verified offline")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
