"""`evalfarm rubric`: draft a weighted rubric for a new case with the judge model.

A vague criterion produces a vague score, so the drafting prompt asks for
criteria two reasonable people could disagree on, small integer weights, and
deterministic checks for anything decidable without judgement.
"""
from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from pydantic import ValidationError

from ..spec.cases import CaseSpec
from .judges import JudgeError, extract_json

RUBRIC_MARKER = "EVALFARM-RUBRIC v1"

SYSTEM = f"""{RUBRIC_MARKER}
You write evaluation rubrics. Given a specification of what a model should do, return one JSON object:
{{"criteria": [{{"id": "snake_case_id", "weight": <small integer 1-3>, "description": "<one checkable sentence>"}}],
 "checks": [<deterministic checks, e.g. {{"kind": "json"}}, {{"kind": "one_of", "field": "f", "values": ["a"]}},
            {{"kind": "max_chars", "value": 500}}>]}}
Each criterion must be specific enough that two reasonable people could disagree on whether it was met.
Put anything decidable without judgement in checks, not in criteria. Reply with the JSON object only."""


def slug(text: str, words: int = 4) -> str:
    parts = re.findall(r"[a-z0-9]+", text.lower())[:words]
    return "_".join(parts) or "case"


Chat = Callable[[list[dict[str, str]]], Awaitable[Any]]


async def draft_case(spec_text: str, chat: Chat, case_id: str | None = None, case_input: str | None = None,
                     tags: list[str] | None = None) -> dict[str, Any]:
    """Ask the model for criteria and checks, validate them as a case; one retry on bad output."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"## Specification\n{spec_text}"}]
    last = ""
    for _ in range(2):
        reply = await chat(messages)
        try:
            data = extract_json(reply.text)
            if not isinstance(data, dict):
                raise JudgeError("not a JSON object")
            case = {"id": case_id or slug(spec_text), "input": case_input or spec_text,
                    "criteria": data.get("criteria") or [], "checks": data.get("checks") or [],
                    "tags": tags or []}
            validated = CaseSpec.model_validate(case)
            if not validated.criteria:
                raise JudgeError("no criteria in the reply")
            return validated.model_dump(mode="json", by_alias=True, exclude_none=True)
        except (JudgeError, ValidationError) as exc:
            last = str(exc).splitlines()[0]
    raise JudgeError(f"the model did not return a usable rubric twice ({last})")
