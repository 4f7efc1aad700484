"""The spec's data model: frozen pydantic models of the file (extra="forbid").

A spec is what the user wrote, validated, and never changed afterwards: which prompts
a run uses (selection, prompt versions, a streamed dataset) lives in
``spec.source.PromptSource``; endpoints filled from flags and the environment make a
new spec (``spec.binding``).
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_serializer, model_validator

from ..names import label_problem


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


class ContainsJsonCheck(_Check):
    """A JSON object somewhere in the output, prose around it allowed (promptfoo's contains-json),
    matching ``schema`` when given; ``absent: true`` passes when there is none."""

    kind: Literal["contains_json"]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    absent: bool = False

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else JsonSchemaCheck._valid_schema(value)


class MaxCharsCheck(_Check):
    kind: Literal["max_chars"]
    value: int = Field(ge=0)


class MaxCostCheck(_Check):
    """The item's model call cost at most ``value`` USD (its adapter's ``price``; promptfoo's ``cost``)."""

    kind: Literal["max_cost_usd"]
    value: float = Field(ge=0)


class MaxLatencyCheck(_Check):
    """The model call answered within ``value`` ms (the answered request's round trip; promptfoo's ``latency``)."""

    kind: Literal["max_latency_ms"]
    value: float = Field(ge=0)


class EmbeddingsEndpoint(_Model):
    """An OpenAI-compatible ``POST {base_url}/embeddings`` endpoint; unset base_url: the adapter's."""

    model: str = Field(default="text-embedding-3-large", min_length=1)
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_base_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        return check_env_name(value)


class SimilarCheck(_Check):
    """The cosine similarity of the output's and ``value``'s embeddings is at least ``threshold``
    (promptfoo's ``similar``, default threshold 0.75)."""

    kind: Literal["similar"]
    value: str = Field(min_length=1)
    threshold: float = Field(default=0.75, ge=-1.0, le=1.0)
    embeddings: EmbeddingsEndpoint = Field(default_factory=EmbeddingsEndpoint)


Check = Annotated[Union[JsonCheck, OneOfCheck, ContainsCheck, NotContainsCheck, RegexCheck, EqualsCheck,
                        JsonSchemaCheck, ContainsJsonCheck, MaxCharsCheck, MaxCostCheck, MaxLatencyCheck,
                        SimilarCheck], Field(discriminator="kind")]
FORMAT_CHECKS = ("json", "one_of", "json_schema", "contains_json", "max_chars")


def _drop_unset(data: Any, names: tuple[str, ...]) -> Any:
    """Spawn-mode fields are left out of a dump while unset, so the item keys and spec hashes of
    specs without agents are the same bytes as before those fields existed."""
    if isinstance(data, dict):
        for name in names:
            if data.get(name) is None:
                data.pop(name, None)
    return data


SPAWN_PROMPT_FIELDS = ("check", "setup", "timeout_s")
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
IMAGE_MAX_BYTES = 20 * 2**20  # a provider's own limit is about this (OpenAI 20 MB, Anthropic 5 MB per image)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class ImageInput(_Model):
    """An image sent with a prompt's text: a public ``url`` (http/https), or ``data`` (base64) with its
    ``media_type``. Each wire sends it in its provider's own shape (README: images)."""

    url: str | None = None
    data: str | None = Field(default=None, repr=False)
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "ImageInput":
        if (self.url is None) == (self.data is None):
            raise ValueError("an image has a url or base64 data (with media_type), exactly one of them")
        if self.url is not None and not re.match(r"https?://[^\s]+$", self.url):
            raise ValueError("an image url must be http:// or https:// (give a local image as data)")
        if self.data is not None:
            if self.media_type is None:
                raise ValueError(f"image data needs its media_type: one of {', '.join(IMAGE_TYPES)}")
            if len(self.data) % 4 or not _BASE64.fullmatch(self.data):
                raise ValueError("image data must be base64 (padded, no line breaks)")
            if len(self.data) * 3 // 4 > IMAGE_MAX_BYTES:
                raise ValueError(f"image data is larger than {IMAGE_MAX_BYTES // 2**20} MB")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return {k: v for k, v in handler(self).items() if v is not None}


class PromptSpec(_Model):
    """One prompt (or case): its input, golden assertions, checks and rubric criteria. For an agent
    (spawn mode) ``text`` is the task, ``check`` a shell command run in the agent's worktree after it
    exits (exit 0 passes), ``setup`` one run before it, ``timeout_s`` the task's budget."""

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
    check: str | None = Field(default=None, min_length=1)
    setup: str | None = Field(default=None, min_length=1)
    timeout_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    images: list[ImageInput] = Field(default_factory=list, max_length=20)  # sent after the text

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        data = _drop_unset(handler(self), SPAWN_PROMPT_FIELDS)
        if isinstance(data, dict) and not data.get("images"):
            data.pop("images", None)  # a prompt without images keeps its item keys and spec hash
        return data

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
    """USD per million tokens; ``batch_input``/``batch_output``: the provider's batch-API price (its own entry:
    about half the live one; unset: a batched call is priced at the live price, an upper bound)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    batch_input: float | None = Field(default=None, ge=0)
    batch_output: float | None = Field(default=None, ge=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return _drop_unset(handler(self), ("batch_input", "batch_output"))

    @property
    def has_batch(self) -> bool:
        return self.batch_input is not None and self.batch_output is not None

    def batched(self) -> "Price":
        """The price of a call sent through the provider's batch API."""
        return Price(input=self.input if self.batch_input is None else self.batch_input,
                     output=self.output if self.batch_output is None else self.batch_output)


def check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("must be the NAME of an environment variable (never the key itself)")
    return value


def _env_names(value: list[str]) -> list[str]:
    for name in value:
        check_env_name(name)
    return value


EnvNames = Annotated[list[str], AfterValidator(_env_names)]  # variables passed through to agents, setup, check


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
    # send through the provider's batch API (openai, anthropic): how a call travels, not what it asks, so
    # it is in neither item keys nor the spec hash
    batch: bool | None = None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        return check_env_name(value)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_base_url(value)


AGENTS = ("claude", "codex", "gemini", "aider", "opencode", "command")  # evalfarm/agents/registry.py's
# each agent's own key variable (the drivers' key_env): an agent adapter's default api_key_env
AGENT_KEY_ENVS = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY",
                  "aider": "OPENAI_API_KEY", "opencode": "OPENAI_API_KEY"}
AGENT_TIMEOUT_S = 1800.0  # an agent adapter's default timeout_s: the budget of one spawned task


BATCH_PROVIDERS = ("openai", "anthropic")  # providers/batch_openai.py, providers/batch_anthropic.py
NATIVE_PROVIDERS = ("anthropic", "gemini", "vertex", "openai-responses", "azure", "http", "bedrock", "replicate")  # providers/*.py


class HttpSpec(_Model):
    """``provider: http``: the request to send (``{{prompt}}`` in any string of ``body`` becomes the prompt)
    and where the text is in the JSON answer (``json.output``; unset: the whole answer)."""

    method: Literal["POST", "PUT", "PATCH"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = Field(default_factory=lambda: {"prompt": "{{prompt}}"})
    response_path: str | None = None

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.lower() in ("authorization", "api-key", "x-api-key", "cookie"):
                raise ValueError(f"header {name!r} would hold a secret in the spec: put the key in an "
                                 "environment variable named by api_key_env (sent as Authorization: Bearer)")
        return value

    @field_validator("response_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None:
            from .jsonpath import alternatives

            alternatives(value)
        return value


class AdapterSpec(_Endpoint):
    """A model under test behind an OpenAI-compatible endpoint, a native protocol (``provider:`` one of
    anthropic, gemini, vertex, openai-responses, azure (``api_version`` required), http (``http:``
    block), bedrock (Converse), replicate (predictions)), echo (the answer is the prompt), or (``provider: agent``) a coding agent
    run in a git worktree of the spec's ``workspace``: ``agent`` names its CLI, ``template`` is the
    command line of ``agent: command``, ``args`` go to the agent's argv; ``base_url`` is the model
    endpoint the agent calls (unset: the agent's own default) and ``timeout_s`` the task budget."""

    id: str = Field(min_length=1)
    provider: str = "openai"
    model: str = Field(min_length=1)
    agent: Literal["claude", "codex", "gemini", "aider", "opencode", "command"] | None = None
    template: str | None = Field(default=None, min_length=1)
    args: list[str] | None = None
    api_version: str | None = Field(default=None, min_length=1)  # azure (required), anthropic-version
    http: HttpSpec | None = None  # provider: http

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return _drop_unset(handler(self), ("agent", "template", "args", "api_version", "http", "batch"))

    @field_validator("api_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        """YAML reads an unquoted ``api_version: 2024-10-21`` as a date: it means the text."""
        import datetime

        return value.isoformat() if isinstance(value, datetime.date) else value

    @model_validator(mode="before")
    @classmethod
    def _agent_defaults(cls, data: Any) -> Any:
        """An agent's defaults are written into the spec (they travel to the workers as they are): a task
        budget of 1800 s, and the agent's own key variable (ANTHROPIC_API_KEY for claude, ...)."""
        if isinstance(data, dict) and data.get("provider") == "agent":
            data = dict(data)
            data.setdefault("timeout_s", AGENT_TIMEOUT_S)
            if data.get("agent") in AGENT_KEY_ENVS:
                data.setdefault("api_key_env", AGENT_KEY_ENVS[data["agent"]])
        return data

    @model_validator(mode="after")
    def _agent_fields(self) -> "AdapterSpec":
        if self.provider == "agent":
            if self.agent is None:
                raise ValueError("provider agent needs 'agent': one of " + ", ".join(AGENTS))
            if (self.agent == "command") != (self.template is not None):
                raise ValueError("'template' (a command line with {prompt}) goes with agent: command, and only there")
        elif self.agent is not None or self.template is not None or self.args is not None:
            raise ValueError("'agent', 'template' and 'args' go with provider: agent")
        if (self.provider == "http") != (self.http is not None):
            raise ValueError("'http' (method, headers, body, response_path) goes with provider: http, and "
                             "provider: http needs it")
        if self.provider == "azure" and not self.api_version:
            raise ValueError("provider azure needs api_version (the Azure OpenAI API version, e.g. 2024-10-21)")
        if self.api_version is not None and self.provider not in ("azure", "anthropic"):
            raise ValueError("'api_version' goes with provider azure or anthropic")
        if self.batch and self.provider not in BATCH_PROVIDERS:
            raise ValueError(f"'batch' goes with provider {' or '.join(BATCH_PROVIDERS)} (their batch APIs)")
        return self

    @property
    def is_agent(self) -> bool:
        return self.provider == "agent"


class JudgeSpec(_Endpoint):
    """LLM-as-judge configuration, apart from the model under test; ``weight`` blends
    it into the overall score, ``pass_score`` is the case score an item needs to pass."""

    model: str = Field(min_length=1)
    provider: str = "openai"
    rubric: str = ""
    weight: float = Field(default=0.5, ge=0.0, le=1.0)
    pass_score: float = Field(default=0.5, ge=0.0, le=1.0)
    api_key_env: str = "EVAL_JUDGE_API_KEY"

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return _drop_unset(handler(self), ("batch",))

    @model_validator(mode="after")
    def _batch_provider(self) -> "JudgeSpec":
        if self.batch and self.provider not in BATCH_PROVIDERS:
            raise ValueError(f"'batch' goes with provider {' or '.join(BATCH_PROVIDERS)} (their batch APIs)")
        return self


class Thresholds(_Model):
    """Per-adapter minimums, each in [0, 1]."""

    golden_pass_rate_min: float | None = Field(default=None, ge=0.0, le=1.0)
    judge_score_min: float | None = Field(default=None, ge=0.0, le=1.0)
    overall_score_min: float | None = Field(default=None, ge=0.0, le=1.0)
    pass_rate_min: float | None = Field(default=None, ge=0.0, le=1.0)  # items whose checks AND judge passed
    # quality rates count measured items only, so a run where most items errored could still "pass":
    # above this share of runtime errors an adapter fails its thresholds (null turns the check off)
    max_error_rate: float | None = Field(default=0.5, ge=0.0, le=1.0)
    # the gate's brakes against a baseline (ci/gate.py): the overall score may fall at most
    # max_drop below the baseline's (unset: not checked); at most max_regressions cases that passed
    # in the baseline may fail now
    max_drop: float | None = Field(default=None, ge=0.0, le=1.0)
    max_regressions: int = Field(default=0, ge=0)


ISOLATIONS = ("sandbox", "none")
_ISOLATION_ALIASES = {"netns": "sandbox", "worktree": "none"}  # the names before issue 18


def _isolation(value: Any) -> Any:
    return _ISOLATION_ALIASES.get(value, value) if isinstance(value, str) else value


Isolation = Annotated[Literal["sandbox", "none"], BeforeValidator(_isolation)]


class Limits(_Model):
    """Per-task resource limits of a sandboxed agent run (agents/limits.py applies and records them)."""

    memory_mb: int = Field(default=4096, ge=16)
    pids: int = Field(default=512, ge=8)
    cpu_s: int = Field(default=3600, ge=1)
    file_mb: int = Field(default=2048, ge=1)


class Workspace(_Model):
    """Where agents work (spawn mode): ``repo`` (a local path, relative to the spec, or a git URL) at
    ``base`` (a commit or ref, resolved to a commit when the spec is loaded, so every trial and worker
    starts from the same tree). ``env`` names variables passed through to the agent, ``check`` and
    ``setup`` (nothing else of the caller's environment is). ``isolation: sandbox`` (the default;
    ``netns`` is its old name) runs every task sealed (agents/jail.py): own PID, network, IPC and UTS
    namespaces, no capabilities, the model reached only through a per-task relay that holds the key;
    ``none`` (old name ``worktree``) is the explicit opt-out, refused by spawn workers unless started
    with ``--allow-unsandboxed``. ``limits`` bound each task, ``max_tokens_per_task`` is enforced at the
    relay, ``seeds`` are exported (beside PYTHONHASHSEED) into the deterministic envelope."""

    repo: str = Field(min_length=1)
    base: str = Field(min_length=1)
    isolation: Isolation = "sandbox"
    env: EnvNames = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    max_tokens_per_task: int | None = Field(default=None, ge=1)
    seeds: dict[str, int] = Field(default_factory=dict)

    @field_validator("seeds")
    @classmethod
    def _seed_names(cls, value: dict[str, int]) -> dict[str, int]:
        for name in value:
            if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
                raise ValueError(f"seeds: {name!r} is not an environment variable name (A-Z, 0-9, _)")
        return value


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
    prompt: str | None = Field(default=None, min_length=1)  # NAME or NAME@VERSION in prompts/ (spec/prompts.py)
    workspace: Workspace | None = None  # spawn mode: the repo and commit agents work in
    # USD the run may spend (model + judge); --max-cost wins. Not part of the spec hash: a budget
    # decides how much is measured, not what a result means
    budget_usd: float | None = Field(default=None, gt=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return _drop_unset(handler(self), ("workspace",))

    @field_validator("name", "lineage_tag")
    @classmethod
    def _label(cls, value: str | None) -> str | None:
        """Names are printed in tab-separated rows (``ls``, ``status``): no tab, newline or control
        character, nothing around them."""
        problem = None if value is None else label_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("adapters")
    @classmethod
    def _unique_adapters(cls, value: list) -> list:
        seen = set()
        for entry in value:
            adapter = entry if isinstance(entry, str) else entry.id
            if not adapter.strip():
                raise ValueError("adapter id must not be empty")
            if label_problem(adapter):
                raise ValueError(f"adapter id {adapter!r} {label_problem(adapter)}")
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

    def spawn_problem(self) -> tuple[tuple, str] | None:
        """(where, what) when agents and a workspace do not go together: agents need a workspace, a
        workspace runs agents only, and check/setup/timeout_s are for agents. The loader reports it
        with the line (spec/load.py); the engine refuses such a spec built in Python."""
        agents = [isinstance(a, AdapterSpec) and a.is_agent for a in self.adapters]
        if any(agents) and self.workspace is None:
            return (("adapters", agents.index(True)),
                    "agent adapters work in a git worktree: add workspace: {repo: PATH-OR-URL, base: REF}")
        if self.workspace is not None and not all(agents):
            i = agents.index(False)
            entry = self.adapters[i]
            return (("adapters", i), f"a spec with a workspace runs coding agents only; adapter "
                    f"{entry if isinstance(entry, str) else entry.id!r} is not one (provider: agent, "
                    "agent: claude|codex|gemini|aider|opencode|command)")
        for i, p in enumerate(self.prompts):
            if (p.check or p.setup or p.timeout_s) and self.workspace is None:
                field = "check" if p.check else "setup" if p.setup else "timeout_s"
                return (("prompts", i, field), f"only agents run {field}: add workspace: {{repo, base}} and "
                                               "agent adapters (provider: agent)")
        return None


def with_batch(spec: EvalSpec) -> EvalSpec:
    """``--batch``: every adapter and the judge that can go through a provider batch API does."""
    adapters = [a.model_copy(update={"batch": True}) if isinstance(a, AdapterSpec) and a.provider in BATCH_PROVIDERS
                else a for a in spec.adapters]
    judge = spec.judge
    if judge is not None and judge.provider in BATCH_PROVIDERS:
        judge = judge.model_copy(update={"batch": True})
    return spec.model_copy(update={"adapters": adapters, "judge": judge})


def strip_batch(dumped: dict[str, Any]) -> dict[str, Any]:
    """A spec dump without ``batch`` flags: the spec hash is the same whether the calls are batched or live."""
    for entry in dumped.get("adapters") or []:
        if isinstance(entry, dict):
            entry.pop("batch", None)
    if isinstance(dumped.get("judge"), dict):
        dumped["judge"].pop("batch", None)
    return dumped
