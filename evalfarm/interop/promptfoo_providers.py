"""promptfoo provider ids as evalfarm adapters: which wire protocol, endpoint and key variable each id means.

    openai:MODEL, openai:chat:MODEL      openai (chat completions), OPENAI_API_KEY
    openai:responses:MODEL               openai-responses, OPENAI_API_KEY
    anthropic:messages:MODEL, anthropic:MODEL   anthropic, ANTHROPIC_API_KEY
    google:MODEL (gemini-*)              gemini (AI Studio), GEMINI_API_KEY (promptfoo also reads GOOGLE_API_KEY)
    vertex:MODEL (gemini-*)              vertex, VERTEX_API_KEY (an access token); config.projectId/region
    azure:chat:DEPLOYMENT                azure, AZURE_API_KEY; config.apiHost, config.apiVersion
    bedrock:MODEL, bedrock:converse:MODEL   bedrock (Converse API), AWS_BEARER_TOKEN_BEDROCK; config.region
    http, https, https://URL             http (config.url, method, headers, body, transformResponse as a path)
    openrouter:, mistral:, xai:, groq:, deepseek:, perplexity:, cerebras:, hyperbolic:, togetherai:,
    fireworks:, nscale:, github:, cometapi:, aimlapi:, docker:, helicone:, vercel:, huggingface:chat:,
    ollama:chat:, cloudflare-ai:chat: (config.accountId)
                                         openai (chat completions) at the service's OpenAI-compatible URL
    xai:responses:MODEL                  openai-responses at xAI
    replicate:OWNER/NAME[:VERSION]       replicate (predictions), REPLICATE_API_TOKEN; config keys are inputs
    echo                                 echo (the answer is the prompt)

Tools (``tools``, ``tool_choice``, ``functions``; Gemini ``toolConfig``; Bedrock ``toolChoice``/``toolConfig``)
are sent as the config writes them (inline or a ``file://`` JSON/YAML file); the answer's tool calls become
JSON text, as promptfoo's output. ``passthrough`` fields go into the request body.

Anything else (image/audio/video/realtime models, agents, scripts) is refused. Where promptfoo
would read an endpoint from the environment (VERTEX_PROJECT_ID, AZURE_API_HOST), the adapter is imported
without base_url and a note says so: ``--base-url`` or an edit of the spec supplies it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Callable

from ..spec.jsonpath import alternatives
from .promptfoo_asserts import Refused

OPENAI_URL = "https://api.openai.com/v1"
AZURE_API_VERSION = "2024-10-21"  # the GA Azure OpenAI API version used when the config names none
_GEMINI_PARAMS = {"temperature": "temperature", "maxOutputTokens": "max_tokens", "topP": "top_p", "topK": "top_k",
                  "stopSequences": "stop", "responseMimeType": "responseMimeType"}

# OpenAI-compatible services: prefix -> (base URL, key variable, model ids that are not chat models)
COMPATIBLE = {
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "xai": ("https://api.x.ai/v1", "XAI_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "perplexity": ("https://api.perplexity.ai", "PERPLEXITY_API_KEY"),
    "cerebras": ("https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
    "hyperbolic": ("https://api.hyperbolic.xyz/v1", "HYPERBOLIC_API_KEY"),
    "togetherai": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "fireworks": ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "nscale": ("https://inference.api.nscale.com/v1", "NSCALE_SERVICE_TOKEN"),
    "github": ("https://models.github.ai/inference", "GITHUB_TOKEN"),
    "cometapi": ("https://api.cometapi.com/v1", "COMETAPI_KEY"),
    "aimlapi": ("https://api.aimlapi.com/v1", "AIML_API_KEY"),
    "docker": ("http://localhost:12434/engines/v1", "DOCKER_MODEL_RUNNER_API_KEY"),  # Docker Model Runner
    "helicone": ("http://localhost:8080/ai", "HELICONE_API_KEY"),  # a Helicone AI Gateway (promptfoo's default)
    "vercel": ("https://ai-gateway.vercel.sh/v1", "VERCEL_AI_GATEWAY_API_KEY"),
    "huggingface": ("https://router.huggingface.co/v1", "HF_TOKEN"),  # huggingface:chat: only (Inference Providers)
}
# OpenAI chat-completions options that pass through to the body under their own names
_OPENAI_EXTRA = {"verbosity": "verbosity", "search_parameters": "search_parameters",
                 "web_search_options": "web_search_options", "search_domain_filter": "search_domain_filter",
                 "search_recency_filter": "search_recency_filter", "search_after_date_filter":
                 "search_after_date_filter", "search_before_date_filter": "search_before_date_filter",
                 "max_new_tokens": "max_tokens", "maxTokens": "max_tokens"}
_OPENAI_TOOLS = frozenset({"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"})
# key variables that are broader credentials than a model API key: the farm's key allow-list leaves them out
BROAD_KEYS = frozenset({"GITHUB_TOKEN", "HF_TOKEN", "DATABRICKS_TOKEN", "CLOUDFLARE_API_KEY"})
_NOT_CHAT = {"chat", "responses", "completion", "embedding", "embeddings", "assistant", "image", "realtime",
             "moderation", "video", "voice", "audio", "transcription", "agents", "chatkit", "live", "tts",
             "claude-agent-sdk", "messages"}
SUPPORTED = ("openai:MODEL, openai:chat:MODEL, openai:responses:MODEL, anthropic:messages:MODEL, google:MODEL, "
             "vertex:MODEL, azure:chat:DEPLOYMENT, bedrock:MODEL, http/https, and OpenAI-compatible " + ", ".join(COMPATIBLE)
             + ", ollama:chat, cloudflare-ai:chat, xai:responses, replicate:OWNER/NAME, echo")


def _none(adapter: dict[str, Any], place: dict[str, Any], params: dict[str, Any], importer: Any) -> None:
    pass


@dataclass
class Family:
    provider: str
    model: str
    base_url: str | None
    key_env: str
    place_keys: frozenset = frozenset()  # config keys that say where the endpoint is (finish() reads them)
    param_names: dict[str, str] = field(default_factory=dict)  # config keys that are params, renamed
    finish: Callable[[dict, dict, dict, Any], None] = _none
    tool_keys: frozenset = frozenset()  # config keys holding tool definitions (inline or file://), sent as written
    dropped: dict[str, str] = field(default_factory=dict)  # config keys that do not change the answer: why
    any_params: bool = False  # every other config key is a request param under its own name (Replicate's inputs)


def _model(pid: str, rest: str) -> str:
    if not rest or rest.split(":")[0] in _NOT_CHAT or rest.split(":")[-1] in _NOT_CHAT:
        raise Refused(f"provider {pid!r} is not a chat model evalfarm can call (supported: {SUPPORTED})", field="id")
    return rest


def _vertex(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    project, region = place.get("projectId"), place.get("region") or "us-central1"
    for name, value in (("projectId", project), ("region", region)):
        if value is not None and (not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9-]+", value)):
            raise Refused(f"config.{name} must be a plain name", field="config")
    if project:
        adapter["base_url"] = (f"https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/"
                               f"{region}")
    else:
        importer.note_endpoint(adapter, "the Vertex project is not in the config (promptfoo reads VERTEX_PROJECT_ID): "
                                        f"set base_url to https://{region}-aiplatform.googleapis.com/v1/projects/"
                                        f"PROJECT/locations/{region}, or pass --base-url")


def _azure(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    host, version = place.get("apiHost"), place.get("apiVersion") or AZURE_API_VERSION
    if isinstance(version, date):  # YAML reads an unquoted 2024-10-21 as a date
        version = version.isoformat()
    deployment = place.get("deployment_id") or adapter["model"]
    if host is not None and (not isinstance(host, str) or not re.fullmatch(r"(https://)?[A-Za-z0-9.-]+/?", host)):
        raise Refused("config.apiHost must be a host name", field="config")
    if not isinstance(version, str) or not re.fullmatch(r"[0-9a-z.-]+", version):
        raise Refused("config.apiVersion must be an Azure API version (2024-10-21)", field="config")
    adapter["api_version"] = version
    adapter["model"] = deployment
    if host:
        adapter["base_url"] = f"https://{host.removeprefix('https://').rstrip('/')}/openai/deployments/{deployment}"
    else:
        importer.note_endpoint(adapter, "the Azure host is not in the config (promptfoo reads AZURE_API_HOST): set "
                                        f"base_url to https://HOST/openai/deployments/{deployment}, or pass --base-url")
    if "apiVersion" not in place:
        importer.note_endpoint(adapter, f"api_version {AZURE_API_VERSION} (the config names none)", endpoint=False)


def _bedrock(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    region = place.get("region") or "us-east-1"
    if not isinstance(region, str) or not re.fullmatch(r"[a-z0-9-]+", region):
        raise Refused("config.region must be an AWS region name", field="config")
    adapter["base_url"] = f"https://bedrock-runtime.{region}.amazonaws.com"
    # inferenceConfig (Converse), interfaceConfig (promptfoo's Nova options), textGenerationConfig (Titan):
    # the same settings by three names
    names = {"maxTokens": "max_tokens", "max_new_tokens": "max_tokens", "maxTokenCount": "max_tokens",
             "temperature": "temperature", "topP": "top_p", "top_p": "top_p", "stopSequences": "stop",
             "top_k": "top_k"}
    for block in ("inferenceConfig", "interfaceConfig", "textGenerationConfig"):
        inference = place.get(block) or {}
        if not isinstance(inference, dict):
            raise Refused(f"config.{block} must be a mapping", field="config")
        for key, value in inference.items():
            if key not in names:
                raise Refused(f"config.{block}.{key} is not supported by the importer", field="config")
            params[names[key]] = value
    importer.note_endpoint(adapter, "called through Bedrock's Converse API with a Bedrock API key "
                                    "(AWS_BEARER_TOKEN_BEDROCK); AWS access keys (SigV4) are not supported"
                           + ("" if "region" in place else "; region us-east-1 (the config names none)"),
                           endpoint=False)


_TEMPLATE = re.compile(r"\{\{\s*([^}]*?)\s*\}\}")
_ENV_BEARER = re.compile(r"Bearer \{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def _templates(value: Any) -> list[str]:
    if isinstance(value, str):
        return _TEMPLATE.findall(value)
    if isinstance(value, list):
        return [t for v in value for t in _templates(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _templates(v)]
    return []


def _http(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    import json

    url = place.get("url", adapter.pop("_url", None))
    adapter.pop("_url", None)
    if not isinstance(url, str) or not re.match(r"https?://[^/\s{}]+[^\s{}]*$", url):
        raise Refused("the http provider needs config.url, an http(s):// URL without {{...}} templates",
                      field="config")
    method = str(place.get("method", "POST")).upper()
    if method not in ("POST", "PUT", "PATCH"):
        raise Refused(f"http method {method} is not supported (POST, PUT, PATCH: a JSON body carries the prompt)",
                      field="config")
    body = place.get("body")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            raise Refused("a raw (non-JSON) http body is not supported: give body as a JSON/YAML mapping",
                          field="config") from None
    if body is None:
        raise Refused("the http provider needs config.body (JSON with {{prompt}})", field="config")
    others = sorted({t for t in _templates(body) if t != "prompt"})
    if any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t) for t in others):
        raise Refused(f"http body template(s) {', '.join(others)}: only {{{{prompt}}}} and plain vars are supported",
                      field="config")
    if others:  # filled in by the importer when each has one value in every test (fill_body_vars)
        adapter["_body_vars"] = others
    if "prompt" not in _templates(body):
        raise Refused("the http body has no {{prompt}}", field="config")
    headers: dict[str, str] = {}
    raw_headers = place.get("headers") or {}
    if not isinstance(raw_headers, dict):
        raise Refused("config.headers must be a mapping", field="config")
    for name, value in raw_headers.items():
        value = str(value)
        bearer = _ENV_BEARER.fullmatch(value)
        if name.lower() == "authorization" and bearer:
            adapter["api_key_env"] = bearer.group(1)
        elif _TEMPLATE.search(value):
            raise Refused(f"http header {name}: templated header values are not supported "
                          "(Authorization: Bearer {{env.NAME}} is)", field="config")
        elif name.lower() in ("authorization", "api-key", "x-api-key", "cookie"):
            raise Refused(f"http header {name} holds a secret in the config: put it in an environment variable "
                          "and write Authorization: Bearer {{env.NAME}}", field="config")
        elif name.lower() != "content-type":
            headers[name] = value
    http: dict[str, Any] = {"method": method, "body": body}
    if headers:
        http["headers"] = headers
    transform = place.get("transformResponse")
    if transform is not None:
        expr = _ARROW.fullmatch(str(transform).strip())
        expr = expr.group("body") if expr else str(transform).strip()
        try:
            alternatives(expr)
        except ValueError:
            raise Refused("transformResponse: only a JSON path (json.output, json?.a || text) or an arrow function "
                          "returning one ((json, text) => json?.response || text) is supported, not other "
                          "JavaScript or a file", field="config") from None
        http["response_path"] = expr
    adapter["base_url"] = url
    adapter["http"] = http
    if params:
        raise Refused(f"config.{next(iter(params))}: the http provider sends only its body", field="config")


# ``(json) => BODY`` / ``(json, text) => BODY``: BODY is then read as a response_path (alternatives of paths)
_ARROW = re.compile(r"\(\s*json\s*(?:,\s*text\s*)?\)\s*=>\s*(?P<body>[^{};]+)", re.S)

_GEMINI_TOOLS = frozenset({"tools", "toolConfig", "systemInstruction"})  # inline or file://
_GEMINI_NAMES = {"maxOutputTokens": "max_tokens", "topP": "top_p", "responseSchema": "responseSchema",
                 "responseMimeType": "responseMimeType"}  # generationConfig fields


def _responses(pid: str, rest: str, base: str, key_env: str) -> Family:
    # Responses API options pass through under their own names (the wire renames max_tokens)
    return Family("openai-responses", _model(pid, rest), base, key_env,
                  param_names={"max_output_tokens": "max_tokens", "reasoning": "reasoning", "instructions":
                               "instructions", "text": "text", "truncation": "truncation",
                               "max_tool_calls": "max_tool_calls", "verbosity": "verbosity"},
                  tool_keys=frozenset({"tools", "tool_choice", "parallel_tool_calls"}), finish=_responses_finish)


def _responses_finish(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    if "verbosity" in params:  # promptfoo sends it as text.verbosity on this API
        text = params.get("text") if isinstance(params.get("text"), dict) else {}
        params["text"] = {**text, "verbosity": params.pop("verbosity")}


_ENV_REF = re.compile(r"\{\{\s*env\.[A-Za-z_][A-Za-z0-9_]*\s*\}\}")


def _plain(place: dict, name: str, pattern: str, what: str) -> str | None:
    """A config value naming part of an endpoint: None when absent or read from the environment
    (``{{env.NAME}}``: promptfoo reads it at run time; the import then notes what to set)."""
    value = place.get(name)
    if value is None or (isinstance(value, str) and _ENV_REF.fullmatch(value.strip())):
        return None
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise Refused(f"config.{name} must be {what}", field="config")
    return value


def _databricks(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    url = _plain(place, "workspaceUrl", r"https://[A-Za-z0-9.-]+/?", "https://HOST")
    if url:  # promptfoo: pay-per-token endpoints at .../serving-endpoints/MODEL/invocations, others the same path
        adapter["base_url"] = f"{url.rstrip('/')}/serving-endpoints/{adapter['model']}/invocations"
    else:
        importer.note_endpoint(adapter, "the Databricks workspace is not in the config (promptfoo reads "
                                        "DATABRICKS_WORKSPACE_URL): set base_url to https://WORKSPACE/"
                                        f"serving-endpoints/{adapter['model']}/invocations, or pass --base-url")


# Cloudflare AI Gateway routes imported: upstream -> (wire, key variable); the gateway forwards the upstream's key
_GATEWAY_UPSTREAMS = {"openai": ("openai", "OPENAI_API_KEY"), "groq": ("openai", "GROQ_API_KEY"),
                      "mistral": ("openai", "MISTRAL_API_KEY"), "grok": ("openai", "XAI_API_KEY"),
                      "perplexity-ai": ("openai", "PERPLEXITY_API_KEY"),
                      "anthropic": ("anthropic", "ANTHROPIC_API_KEY")}


def _gateway(upstream: str, adapter: dict, place: dict, params: dict, importer: Any) -> None:
    ids = [_plain(place, "accountId", r"[\w-]+", "a plain id"), _plain(place, "gatewayId", r"[\w-]+", "a plain id")]
    account, gateway = ids[0] or "ACCOUNT", ids[1] or "GATEWAY"
    base = f"https://gateway.ai.cloudflare.com/v1/{account}/{gateway}/{upstream}"
    adapter["base_url"] = base + ("/v1" if upstream == "anthropic" else "")  # the Anthropic wire adds /messages
    if not all(ids):
        importer.note_endpoint(adapter, "the Cloudflare account or gateway is not in the config (promptfoo reads "
                                        f"CLOUDFLARE_ACCOUNT_ID/CLOUDFLARE_GATEWAY_ID): edit base_url {base}")


def _cloudflare(adapter: dict, place: dict, params: dict, importer: Any) -> None:
    account = _plain(place, "accountId", r"[\w-]+", "a Cloudflare account id")
    if account:
        adapter["base_url"] = f"https://api.cloudflare.com/client/v4/accounts/{account}/ai/v1"
    elif "base_url" not in adapter:
        importer.note_endpoint(adapter, "the Cloudflare account is not in the config (promptfoo reads "
                                        "CLOUDFLARE_ACCOUNT_ID): set base_url to https://api.cloudflare.com/client/v4/"
                                        "accounts/ACCOUNT/ai/v1, or pass --base-url")


def fill_body_vars(adapter: dict, combos: list[dict[str, Any]]) -> None:
    """An http body's ``{{var}}`` with one string value in every test is that constant; else Refused."""
    names = adapter.pop("_body_vars", None)
    if not names:
        return
    values = {}
    for name in names:
        seen = {c.get(name) for c in combos}
        if len(seen) != 1 or not isinstance(next(iter(seen)), str):
            raise Refused(f"http body template(s) {', '.join(names)}: only {{{{prompt}}}} and vars with one value "
                          f"in every test are supported ({name} varies or is missing)", field="config")
        values[name] = next(iter(seen))

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return _TEMPLATE.sub(lambda m: values.get(m.group(1), m.group(0)), value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    adapter["http"]["body"] = fill(adapter["http"]["body"])


def provider_family(pid: str) -> Family:
    """A promptfoo provider id's wire protocol, endpoint and key variable; Refused when there is none."""
    prefix, _, rest = pid.partition(":")
    if prefix == "openai":
        if rest.startswith("responses:"):
            # Responses API options pass through under their own names (the wire renames max_tokens)
            return _responses(pid, rest[len("responses:"):], OPENAI_URL, "OPENAI_API_KEY")
        if rest.startswith("chat:"):
            rest = rest[len("chat:"):]
        return Family("openai", _model(pid, rest), OPENAI_URL, "OPENAI_API_KEY", param_names=_OPENAI_EXTRA,
                      tool_keys=_OPENAI_TOOLS)
    if prefix == "anthropic":
        if rest.startswith("messages:"):
            rest = rest[len("messages:"):]
        return Family("anthropic", _model(pid, rest), "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY",
                      param_names={"max_tokens": "max_tokens", "top_k": "top_k", "thinking": "thinking"},
                      tool_keys=frozenset({"tools", "tool_choice"}))
    if prefix == "google" and rest.startswith("gemini"):
        return Family("gemini", _model(pid, rest), "https://generativelanguage.googleapis.com/v1beta",
                      "GEMINI_API_KEY", param_names=_GEMINI_NAMES, tool_keys=_GEMINI_TOOLS)
    if prefix == "vertex" and rest.startswith("gemini"):
        return Family("vertex", _model(pid, rest), None, "VERTEX_API_KEY",
                      place_keys=frozenset({"projectId", "region"}), finish=_vertex,
                      param_names=_GEMINI_NAMES, tool_keys=_GEMINI_TOOLS)
    if prefix == "azure" and rest.startswith("chat:"):
        return Family("azure", _model(pid, rest[len("chat:"):]), None, "AZURE_API_KEY",
                      place_keys=frozenset({"apiHost", "apiVersion", "deployment_id"}), finish=_azure,
                      param_names=_OPENAI_EXTRA, tool_keys=_OPENAI_TOOLS)
    if pid in ("http", "https") or re.match(r"https?://", pid):
        fam = Family("http", "http", None, "EVAL_API_KEY",
                     place_keys=frozenset({"url", "method", "headers", "body", "transformResponse"}), finish=_http)
        if pid not in ("http", "https"):
            fam.finish = lambda a, p, q, i: (a.__setitem__("_url", pid), _http(a, p, q, i))[-1]
        return fam
    if prefix == "bedrock":
        rest = rest.removeprefix("converse:")
        if rest.split(":")[0] in ("kb", "video", "embeddings", "embedding", "agents", "agent", "image", "nova-sonic") \
                or rest.startswith(("StartAsyncInvoke", "GetAsyncInvoke")):
            raise Refused(f"provider {pid!r} is not a chat model evalfarm can call (supported: {SUPPORTED})",
                          field="id")
        return Family("bedrock", _model(pid, rest), None, "AWS_BEARER_TOKEN_BEDROCK",
                      place_keys=frozenset({"region", "inferenceModelType", "inferenceConfig", "interfaceConfig",
                                            "textGenerationConfig"}),
                      finish=_bedrock,
                      param_names={"maxTokens": "max_tokens", "max_new_tokens": "max_tokens",
                                   "max_gen_len": "max_tokens", "topP": "top_p", "top_k": "top_k",
                                   "reasoningConfig": "reasoningConfig"},  # -> additionalModelRequestFields
                      tool_keys=frozenset({"tools", "tool_choice", "toolChoice", "toolConfig"}))
    if pid == "echo":  # the answer is the prompt: evalfarm's echo adapter
        return Family("echo", "echo", None, "")
    if prefix == "litellm":  # the LiteLLM proxy's OpenAI-compatible endpoint (promptfoo's default address)
        return Family("openai", _model(pid, rest.removeprefix("chat:")), "http://localhost:4000/v1", "EVAL_API_KEY")
    if prefix == "ollama" and rest.startswith("chat:"):
        return Family("openai", _model(pid, rest[len("chat:"):]), "http://localhost:11434/v1", "EVAL_API_KEY",
                      param_names=_OPENAI_EXTRA, tool_keys=_OPENAI_TOOLS)
    if prefix == "xai" and rest.startswith("responses:"):
        return _responses(pid, rest[len("responses:"):], *COMPATIBLE["xai"])
    if prefix == "cloudflare-ai" and rest.startswith("chat:"):  # Workers AI's OpenAI-compatible endpoint
        return Family("openai", _model(pid, rest[len("chat:"):]), None, "CLOUDFLARE_API_KEY",
                      place_keys=frozenset({"accountId"}), finish=_cloudflare, param_names=_OPENAI_EXTRA,
                      tool_keys=_OPENAI_TOOLS)
    if prefix == "databricks":  # Mosaic AI Model Serving: an endpoint's OpenAI-compatible invocations URL
        return Family("openai", _model(pid, rest), None, "DATABRICKS_TOKEN",
                      place_keys=frozenset({"workspaceUrl", "isPayPerToken"}), finish=_databricks,
                      param_names={**_OPENAI_EXTRA, "usageContext": "usage_context"}, tool_keys=_OPENAI_TOOLS)
    if prefix == "cloudflare-gateway":
        upstream, _, model = rest.partition(":")
        if upstream not in _GATEWAY_UPSTREAMS:
            raise Refused(f"provider {pid!r}: only the gateway's {', '.join(sorted(_GATEWAY_UPSTREAMS))} routes are "
                          "imported", field="id")
        kind, key_env = _GATEWAY_UPSTREAMS[upstream]
        return Family(kind, _model(pid, model), None, key_env,
                      place_keys=frozenset({"accountId", "gatewayId"}),
                      finish=lambda a, p, q, i: _gateway(upstream, a, p, q, i),
                      param_names=_OPENAI_EXTRA if kind == "openai" else {"max_tokens": "max_tokens", "top_k": "top_k"},
                      tool_keys=_OPENAI_TOOLS if kind == "openai" else frozenset({"tools", "tool_choice"}))
    if prefix == "replicate":  # predictions API; every config key is a model input (promptfoo spreads config)
        if rest.split(":")[0] in ("image", "moderation", "embedding", "embeddings") or "/" not in rest:
            raise Refused(f"provider {pid!r} is not a chat model evalfarm can call (supported: {SUPPORTED})",
                          field="id")
        return Family("replicate", rest, "https://api.replicate.com/v1", "REPLICATE_API_TOKEN", any_params=True)
    if prefix == "truefoundry":  # TrueFoundry's LLM gateway (OpenAI chat); metadata/loggingConfig are its headers
        return Family("openai", _model(pid, rest), "https://llm-gateway.truefoundry.com", "TRUEFOUNDRY_API_KEY",
                      param_names=_OPENAI_EXTRA, tool_keys=_OPENAI_TOOLS,
                      dropped={"metadata": "TrueFoundry's request metadata header, for its logs",
                               "loggingConfig": "TrueFoundry's request logging header"})
    if prefix in COMPATIBLE and (prefix != "huggingface" or rest.startswith("chat:")):
        if rest.startswith("chat:"):
            rest = rest[len("chat:"):]
        base, key = COMPATIBLE[prefix]
        return Family("openai", _model(pid, rest), base, key, param_names=_OPENAI_EXTRA, tool_keys=_OPENAI_TOOLS)
    raise Refused(f"provider {pid!r} is not supported by the importer (supported: {SUPPORTED})", field="id")
