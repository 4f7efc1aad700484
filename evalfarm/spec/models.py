"""The spec's data model: frozen pydantic models of the file (extra="forbid").

A spec is what the user wrote, validated, and never changed afterwards: which prompts
a run uses (selection, prompt versions, a streamed dataset) lives in
``spec.source.PromptSource``; endpoints filled from flags and the environment make a
new spec (``spec.binding``).
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def check_regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Criterion(_Model):
    """A rubric criterion the judge scores; weights are relative, not percentages."""

    id: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    description: str = Field(min_length=1)


class _Check(_Model):
    pass


class JsonCheck(_Check):
    kind: Literal["json"]


class OneOfCheck(_Check):
    kind: Literal["one_of"]
    field: str = Field(min_length=1)
    values: list[Any] = Field(min_length=1)


class ContainsCheck(_Check):
    kind: Literal["contains"]
    value: str


class NotContainsCheck(_Check):
    kind: Literal["not_contains"]
    value: str


class RegexCheck(_Check):
    kind: Literal["regex"]
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return check_regex(value)


class EqualsCheck(_Check):
    kind: Literal["equals"]
    value: Any
    field: str | None = None  # compare a JSON field instead of the whole (stripped) output


class JsonSchemaCheck(_Check):
    kind: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        import jsonschema

        try:
            jsonschema.validators.validator_for(value).check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a valid JSON schema: {exc.message}") from None
        return value


class MaxCharsCheck(_Check):
    kind: Literal["max_chars"]
    value: int = Field(ge=0)


Check = Annotated[Union[JsonCheck, OneOfCheck, ContainsCheck, NotContainsCheck, RegexCheck, EqualsCheck,
                        JsonSchemaCheck, MaxCharsCheck], Field(discriminator="kind")]
FORMAT_CHECKS = ("json", "one_of", "json_schema", "max_chars")


class PromptSpec(_Model):
    """One prompt (or case): its input, golden assertions, checks and rubric criteria."""

    id: str = Field(min_length=1)
    text: str
    expected_output_contains: list[str] = Field(default_factory=list)
    expected_output_regex: str | None = None
    tags: list[str] = Field(default_factory=list)
    system: str | None = None  # system prompt sent with this prompt (set by a prompt version, or inline)
    checks: list[Check] = Field(default_factory=list)
    criteria: list[Criterion] = Field(default_factory=list)
    # a reply cut at max_tokens (finish_reason "length") fails as truncation unless the case allows it
    allow_truncation: bool = False

    @field_validator("criteria")
    @classmethod
    def _unique_criteria(cls, value: list[Criterion]) -> list[Criterion]:
        ids = [c.id for c in value]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate criterion id {sorted(dup)[0]!r}")
        return value

    @field_validator("expected_output_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        return check_regex(value)


class Price(_Model):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


def check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("must be the NAME of an environment variable (never the key itself)")
    return value


def check_base_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


class _Endpoint(_Model):
    """What calling an OpenAI-compatible endpoint needs. The key is read from ``api_key_env``
    at call time on the worker: only the variable's name is ever stored."""

    base_url: str | None = None  # default: from the flags or the environment (see bind_environment)
    api_key_env: str = "EVAL_API_KEY"
    params: dict[str, Any] = Field(default_factory=dict)  # temperature, max_tokens, ...
    price: Price | None = None  # USD per million tokens
    timeout_s: float = Field(default=120.0, gt=0)
    max_in_flight: int | None = Field(default=None, ge=1)  # per endpoint and key, across the fleet
    requests_per_minute: int | None = Field(default=None, ge=1)  # per endpoint and key, across the fleet

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        return check_env_name(value)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_base_url(value)


class AdapterSpec(_Endpoint):
    """A model under test behind an OpenAI-compatible endpoint."""

    id: str = Field(min_length=1)
    provider: str = "openai"
    model: str = Field(min_length=1)


class JudgeSpec(_Endpoint):
    """LLM-as-judge configuration, apart from the model under test; ``weight`` blends
    it into the overall score, ``pass_score`` is the case score an item needs to pass."""

    model: str = Field(min_length=1)
    provider: str = "openai"
    rubric: str = ""
    weight: float = Field(default=0.5, ge=0.0, le=1.0)
    pass_score: float = Field(default=0.5, ge=0.0, le=1.0)
    api_key_env: str = "EVAL_JUDGE_API_KEY"


class Thresholds(_Model):
    """Per-adapter minimums, each in [0, 1]."""

    golden_pass_rate_min: float | None = Field(default=None, ge=0.0, le=1.0)
    judge_score_min: float | None = Field(default=None, ge=0.0, le=1.0)
    overall_score_min: float | None = Field(default=None, ge=0.0, le=1.0)
    pass_rate_min: float | None = Field(default=None, ge=0.0, le=1.0)  # items whose checks AND judge passed
    # quality rates count measured items only, so a run where most items errored could still "pass":
    # above this share of runtime errors an adapter fails its thresholds (null turns the check off)
    max_error_rate: float | None = Field(default=0.5, ge=0.0, le=1.0)
    # the gate's brakes against a baseline (evalfarm/gate.py): the overall score may fall at most
    # max_drop below the baseline's (unset: not checked); at most max_regressions cases that passed
    # in the baseline may fail now
    max_drop: float | None = Field(default=None, ge=0.0, le=1.0)
    max_regressions: int = Field(default=0, ge=0)


class EvalSpec(_Model):
    """A whole suite: what to ask, whom, how to score and what must hold."""

    name: str = Field(min_length=1)
    lineage_tag: str | None = None
    dataset: str | None = None
    adapters: list[Union[str, AdapterSpec]] = Field(min_length=1)
    prompts: list[PromptSpec] = Field(default_factory=list)
    judge: JudgeSpec | None = None
    thresholds: Thresholds = Field(default_factory=Thresholds)
    trials: int = Field(default=1, ge=1, le=1000)
    prompt: str | None = Field(default=None, min_length=1)  # NAME or NAME@VERSION in prompts/ (prompt_store.py)
    # USD the run may spend (model + judge); --max-cost wins. Not part of the spec hash: a budget
    # decides how much is measured, not what a result means
    budget_usd: float | None = Field(default=None, gt=0)

    @field_validator("adapters")
    @classmethod
    def _unique_adapters(cls, value: list) -> list:
        seen = set()
        for entry in value:
            adapter = entry if isinstance(entry, str) else entry.id
            if not adapter.strip():
                raise ValueError("adapter id must not be empty")
            if adapter in seen:
                raise ValueError(f"duplicate adapter id {adapter!r}")
            seen.add(adapter)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "EvalSpec":
        if self.thresholds.judge_score_min is not None and self.judge is None:
            raise ValueError("thresholds.judge_score_min is set but there is no 'judge' block; "
                             "add a judge or remove the threshold")
        return self

    @property
    def tag(self) -> str:
        return self.lineage_tag or self.name

    @property
    def adapter_ids(self) -> list[str]:
        return [a if isinstance(a, str) else a.id for a in self.adapters]
