"""Judges: score an output in [0, 1], per weighted criterion when the case has them.

``LLMJudge`` builds the judging prompt, calls a transport (an OpenAI-compatible
endpoint, or a scripted one offline), parses the JSON verdicts robustly (code
fences, prose around it), retries once on unparseable output, then gives up
with a ``JudgeError``: a runtime error, never a quality verdict.
"""
from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from ..spec.models import Criterion, JudgeSpec, PromptSpec

_WORD = re.compile(r"[a-z0-9]+")
JUDGE_MARKER = "EVALFARM-JUDGE v1"


class JudgeError(Exception):
    """The judge could not produce a usable verdict."""


def clamp01(value: float) -> float:
    """Scores outside [0, 1] are clamped, never trusted as-is."""
    value = float(value)
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, value))


@dataclass
class JudgeResult:
    score: float
    criteria: list[dict[str, Any]] = field(default_factory=list)  # id, weight, score, verdict, reason
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class Judge(Protocol):
    def config(self) -> dict[str, Any]: ...

    async def judge(self, prompt: PromptSpec, output: str) -> JudgeResult: ...


def weighted_score(criteria: list[dict[str, Any]]) -> float:
    """Case score = weighted mean of criterion scores."""
    total = sum(c["weight"] for c in criteria)
    return clamp01(sum(c["weight"] * c["score"] for c in criteria) / total) if total else 0.0


# -- the judging prompt and its parsing ---------------------------------------------------------

def judging_messages(spec: JudgeSpec, prompt: PromptSpec, output: str) -> list[dict[str, str]]:
    system = (f"{JUDGE_MARKER}\nYou are a strict evaluation judge. Judge only what the criteria say. "
              "Reply with one JSON object and nothing else.")
    parts = [f"## Input\n{prompt.text}", f"## Output under evaluation\n{output}"]
    if prompt.criteria:
        lines = "\n".join(f"- id: {c.id} (weight {c.weight:g}): {c.description.strip()}" for c in prompt.criteria)
        parts.append(f"## Criteria\n{lines}")
        parts.append('## Answer format\n{"criteria": [{"id": "<criterion id>", "verdict": "pass" or "fail", '
                     '"reason": "<one sentence>"}]}  -- one entry for every criterion id above.')
    else:
        parts.append(f"## Rubric\n{spec.rubric.strip() or 'Score the overall correctness of the output.'}")
        parts.append('## Answer format\n{"score": <number from 0 to 1>, "reason": "<one sentence>"}')
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def extract_json(text: str) -> Any:
    """The first JSON object in ``text``: bare, fenced, or inside prose."""
    text = text.strip()
    for candidate in re.findall(r"```(?:json)?\s*(.*?)```", text, re.S) + [text]:
        try:
            return json.loads(candidate.strip())
        except (json.JSONDecodeError, ValueError):
            pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text[match.start():])
            return value
        except json.JSONDecodeError:
            continue
    raise JudgeError(f"no JSON object in the judge's reply: {text[:120]!r}")


def _criterion_score(entry: dict[str, Any]) -> float:
    if "score" in entry and isinstance(entry["score"], (int, float)):
        return clamp01(entry["score"])
    verdict = str(entry.get("verdict", "")).strip().lower()
    if verdict in ("pass", "passed", "yes", "true", "met", "1"):
        return 1.0
    if verdict in ("fail", "failed", "no", "false", "not met", "0"):
        return 0.0
    raise JudgeError(f"criterion {entry.get('id')!r}: verdict {entry.get('verdict')!r} is not pass/fail")


def parse_verdict(text: str, criteria: list[Criterion]) -> JudgeResult:
    data = extract_json(text)
    if not isinstance(data, dict):
        raise JudgeError("the judge's reply is not a JSON object")
    if not criteria:
        if not isinstance(data.get("score"), (int, float)):
            raise JudgeError("the judge's reply has no numeric 'score'")
        return JudgeResult(score=clamp01(data["score"]), reason=str(data.get("reason", ""))[:500])
    entries = data.get("criteria")
    if isinstance(entries, dict):  # {"id": {"verdict": ...}} is a common variant
        entries = [{"id": k, **(v if isinstance(v, dict) else {"verdict": v})} for k, v in entries.items()]
    if not isinstance(entries, list):
        raise JudgeError("the judge's reply has no 'criteria' list")
    by_id = {str(e.get("id")): e for e in entries if isinstance(e, dict)}
    missing = [c.id for c in criteria if c.id not in by_id]
    if missing:
        raise JudgeError(f"the judge's reply has no verdict for criterion {missing[0]!r}")
    scored = []
    for c in criteria:
        s = _criterion_score(by_id[c.id])
        scored.append({"id": c.id, "weight": c.weight, "score": s, "verdict": "pass" if s >= 0.5 else "fail",
                       "reason": str(by_id[c.id].get("reason", ""))[:300]})
    return JudgeResult(score=weighted_score(scored), criteria=scored)


Transport = Callable[[list[dict[str, str]]], Awaitable[Any]]  # -> object with text, tokens, cost


class LLMJudge:
    """A rubric judge over any chat transport; one retry on an unparseable reply."""

    def __init__(self, spec: JudgeSpec, transport: Transport, kind: str = "llm",
                 aclose: Callable[[], Awaitable[None]] | None = None) -> None:
        self.spec, self.transport, self.kind, self._aclose = spec, transport, kind, aclose

    async def aclose(self) -> None:
        if self._aclose is not None:
            await self._aclose()

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.spec.model_dump(exclude={"price", "weight", "pass_score", "batch"})}

    async def judge(self, prompt: PromptSpec, output: str) -> JudgeResult:
        messages = judging_messages(self.spec, prompt, output)
        t_in = t_out = 0
        cost = 0.0
        last: JudgeError | None = None
        for _ in range(2):
            reply = await self.transport(messages)
            t_in, t_out, cost = t_in + reply.input_tokens, t_out + reply.output_tokens, cost + reply.cost_usd
            try:
                result = parse_verdict(reply.text, prompt.criteria)
            except JudgeError as exc:
                last = exc
                continue
            result.input_tokens, result.output_tokens, result.cost_usd = t_in, t_out, cost
            return result
        err = JudgeError(f"unparseable judge output twice: {last}")
        err.tokens = (t_in, t_out, cost)  # type: ignore[attr-defined]
        raise err


class MockJudge:
    """Offline and deterministic: the fraction of the input's words found in the output
    (per criterion, the fraction of the criterion description's words)."""

    def __init__(self, spec: JudgeSpec) -> None:
        self.spec = spec

    def config(self) -> dict[str, Any]:
        return {"kind": "mock", **self.spec.model_dump(exclude={"price", "weight", "pass_score"})}

    @staticmethod
    def _overlap(reference: str, output: str) -> float:
        words = set(_WORD.findall(reference.lower()))
        if not words:
            return 1.0
        return len(words & set(_WORD.findall(output.lower()))) / len(words)

    async def judge(self, prompt: PromptSpec, output: str) -> JudgeResult:
        if not prompt.criteria:
            return JudgeResult(score=clamp01(self._overlap(prompt.text, output)))
        scored = []
        for c in prompt.criteria:
            s = 1.0 if self._overlap(prompt.text, output) >= 0.5 else 0.0
            scored.append({"id": c.id, "weight": c.weight, "score": s, "verdict": "pass" if s else "fail",
                           "reason": "word overlap with the input"})
        return JudgeResult(score=weighted_score(scored), criteria=scored)


class CallableJudge:
    """Wraps a plain synchronous ``judge(judge_spec, prompt, output) -> float`` (the Python API)."""

    def __init__(self, spec: JudgeSpec, fn: Callable[[JudgeSpec, PromptSpec, str], float]) -> None:
        self.spec, self._fn = spec, fn

    def config(self) -> dict[str, Any]:
        return {"kind": "callable", **self.spec.model_dump(exclude={"price", "weight", "pass_score"})}

    async def judge(self, prompt: PromptSpec, output: str) -> JudgeResult:
        return JudgeResult(score=clamp01(await asyncio.to_thread(self._fn, self.spec, prompt, output)))
