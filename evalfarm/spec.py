"""The eval spec: pydantic models (extra="forbid") and loading with file:line errors.

``load_spec(path)`` validates the YAML, the dataset JSONL it names and the merged
prompt list before anything runs, so bad input stops here.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Iterable, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .errors import SpecError
from .sourcemap import dotted, line_for, load_yaml, read_text


def check_regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


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

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

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

    _source: Path | None = PrivateAttr(default=None)
    _prompt_info: dict | None = PrivateAttr(default=None)  # set by prompt_store.apply_prompt_version
    _resolved: list[PromptSpec] | None = PrivateAttr(default=None)
    _stream: Path | None = PrivateAttr(default=None)  # a big JSONL dataset, re-read instead of held
    _count: int | None = PrivateAttr(default=None)
    _lines: dict | None = PrivateAttr(default=None)

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
        if not self.prompts and not self.dataset:
            raise ValueError("the spec needs inline 'prompts' or a 'dataset'")
        if self.thresholds.judge_score_min is not None and self.judge is None:
            raise ValueError("thresholds.judge_score_min is set but there is no 'judge' block; "
                             "add a judge or remove the threshold")
        return self

    @property
    def tag(self) -> str:
        return self.lineage_tag or self.name

    def restrict_to(self, tags: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> None:
        """Keep only the prompts selected by --tag / --case."""
        self._resolved = restrict(self.resolved_prompts(), tags, cases)

    @property
    def adapter_ids(self) -> list[str]:
        return [a if isinstance(a, str) else a.id for a in self.adapters]

    def iter_prompts(self) -> Iterator[PromptSpec]:
        """Every prompt, inline first; a streamed dataset is re-read (it was validated at load)."""
        if self._stream is None:
            yield from self.resolved_prompts()
            return
        yield from self.prompts
        for prompt, _, _ in iter_dataset(self._stream):
            yield prompt

    def prompt_count(self) -> int:
        if self._stream is not None and self._count is not None:
            return self._count
        return len(self.resolved_prompts())

    def resolved_prompts(self, base_dir: Path | None = None) -> list[PromptSpec]:
        """Inline prompts then dataset prompts, checked for duplicate ids."""
        if self._resolved is not None and base_dir is None:
            return self._resolved
        if self._stream is not None and base_dir is None:
            self._resolved = list(self.iter_prompts())
            self._stream = None
            return self._resolved
        base = base_dir or (self._source.parent if self._source else Path.cwd())
        origins: list[tuple[PromptSpec, str, int | None]] = [
            (p, str(self._source or "spec"), None) for p in self.prompts]
        if self.dataset:
            origins += load_any_dataset(base / self.dataset, spec_path=self._source)
        _check_duplicates(origins)
        self._resolved = [p for p, _, _ in origins]
        return self._resolved


def _check_duplicates(origins: Iterable[tuple[PromptSpec, str, int | None]]) -> int:
    """Raises on the first duplicate id; returns how many prompts there were."""
    first: dict[str, str] = {}
    for prompt, path, line in origins:
        where = f"{path}:{line}" if line else path
        if prompt.id in first:
            raise SpecError(f"duplicate prompt id {prompt.id!r} (first defined at {first[prompt.id]}); "
                            "ids must be unique across inline prompts and the dataset",
                            path=path, line=line, field="id")
        first[prompt.id] = where
    return len(first)


def load_any_dataset(path: Path, spec_path: Path | None = None) -> list[tuple[PromptSpec, str, int | None]]:
    """JSONL prompts, or case YAML (a file or a directory of them)."""
    if path.is_dir() or path.suffix in (".yaml", ".yml"):
        from .cases import load_cases

        return load_cases([path])
    return load_dataset(path, spec_path)


def restrict(prompts: list[PromptSpec], tags: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> list[PromptSpec]:
    """Only prompts carrying one of ``tags`` and/or named in ``cases``; unknown case ids are an error."""
    if cases:
        known = {p.id for p in prompts}
        unknown = [c for c in cases if c not in known]
        if unknown:
            raise SpecError(f"--case {unknown[0]!r}: no such case id (known: {', '.join(sorted(known)[:10])}"
                            f"{', ...' if len(known) > 10 else ''})")
        prompts = [p for p in prompts if p.id in cases]
    if tags:
        prompts = [p for p in prompts if set(p.tags) & set(tags)]
    if not prompts:
        raise SpecError(f"no case left after --tag {', '.join(tags)}" if tags else "no case selected")
    return prompts


def load_dataset(path: Path, spec_path: Path | None = None) -> list[tuple[PromptSpec, str, int]]:
    """Parse a JSONL dataset; each non-blank line is one PromptSpec."""
    return list(iter_dataset(path, spec_path))


def iter_dataset(path: Path, spec_path: Path | None = None) -> Iterator[tuple[PromptSpec, str, int]]:
    """Stream a JSONL dataset line by line: 100,000 prompts never sit in memory at once."""
    if not path.is_file():
        raise SpecError(f"dataset file not found: {path}", path=str(spec_path or path), field="dataset")
    read_text(path, check_only=True)  # one clear error for a non-UTF-8 file, with its line
    with open(path, encoding="utf-8") as fh:
        yield from _parse_lines(fh, path)


def _parse_lines(lines: Iterable[str], path: Path) -> Iterator[tuple[PromptSpec, str, int]]:
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=str(path), line=lineno) from None
        if not isinstance(obj, dict):
            raise SpecError(f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=lineno)
        try:
            prompt = PromptSpec.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise SpecError(_message(err, PromptSpec), path=str(path), line=lineno,
                            field=dotted(err["loc"]) or None) from None
        yield prompt, str(path), lineno


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Allowed field names of the model that owns ``loc``'s last part."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
    return sorted(current.model_fields) if current else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found:
            return found
    return None


def _message(err: dict, model: type[BaseModel]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, tuple(err["loc"]))
        return f"unknown field; allowed fields are {', '.join(allowed)}" if allowed else "unknown field"
    if kind == "missing":
        return "required field is missing"
    msg = msg.removeprefix("Value error, ")
    if kind not in ("value_error", "assertion_error") and "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return msg


_UNION_TAGS = {"str", "AdapterSpec", "JudgeSpec", "PromptSpec"}


def _useful_errors(errors: list[dict]) -> list[dict]:
    """For ``str | AdapterSpec`` entries pydantic reports both branches; keep the branch that
    matches what the user wrote (a mapping is an adapter object) and drop the union tags from
    the location, so the message names the real field and line."""
    kept = []
    for err in errors:
        loc = tuple(err["loc"])
        if "str" in loc and isinstance(err.get("input"), dict):
            continue
        if "AdapterSpec" in loc and loc[-1] == "AdapterSpec" and isinstance(err.get("input"), str):
            continue
        err = dict(err, loc=tuple(p for p in loc if p not in _UNION_TAGS or not isinstance(p, str)))
        kept.append(err)
    return kept or errors


def parse_spec(data: Any, *, path: Path, lines: dict | None = None) -> EvalSpec:
    """Validate already-parsed YAML data into an EvalSpec with file:line errors."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise SpecError("the spec must be a YAML mapping with at least 'name' and 'adapters'",
                        path=str(path), line=1)
    try:
        spec = EvalSpec.model_validate(data)
    except ValidationError as exc:
        errors = _useful_errors(exc.errors())
        err = errors[0]
        loc = tuple(err["loc"])
        more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise SpecError(_message(err, EvalSpec) + more, path=str(path), line=line_for(lines, loc),
                        field=dotted(loc) or None) from None
    spec._source = path
    spec._lines = lines
    return spec


def load_spec(path: Path | str) -> EvalSpec:
    """Load and fully validate a spec file, its dataset and merged prompts."""
    path = Path(path)
    data, lines = load_yaml(read_text(path), path)
    spec = parse_spec(data, path=path, lines=lines)
    # duplicate inline ids get their own line numbers
    origins = [(p, str(path), line_for(lines, ("prompts", i, "id"))) for i, p in enumerate(spec.prompts)]
    if spec.dataset:
        dataset_line = line_for(lines, ("dataset",))
        ds_path = path.parent / spec.dataset
        if not ds_path.exists():
            raise SpecError(f"dataset file not found: {ds_path}", path=str(path), line=dataset_line,
                            field="dataset")
        if ds_path.is_file() and ds_path.suffix not in (".yaml", ".yml"):
            # JSONL: validate it all now (bad input stops here), keep only the ids; re-read when planning
            import itertools

            spec._count = _check_duplicates(itertools.chain(origins, iter_dataset(ds_path, spec_path=path)))
            spec._stream = ds_path
            if not spec._count:
                raise SpecError("no prompts: the dataset is empty and there are no inline prompts",
                                path=str(path), line=dataset_line, field="dataset")
            return spec
        origins += load_any_dataset(ds_path, spec_path=path)
    _check_duplicates(origins)
    spec._resolved = [p for p, _, _ in origins]
    if not spec._resolved:
        raise SpecError("no prompts: the dataset is empty and there are no inline prompts",
                        path=str(path), line=line_for(lines, ("dataset",)), field="dataset")
    return spec
