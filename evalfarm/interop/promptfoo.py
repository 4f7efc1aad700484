"""Import a promptfoo config (promptfooconfig.yaml) as an evalfarm spec.

promptfoo runs every (prompt, test) pair on every provider; evalfarm runs every prompt on every
adapter. So each (prompt template, test, var combination) becomes one rendered evalfarm prompt,
each OpenAI-compatible provider one adapter, each assertion checks or a judge criterion (see
promptfoo_asserts.py). What has no faithful equivalent is *refused* with its file and line; the
caller stops on refusals unless told to skip them. Semantics follow promptfoo 0.123.1 (read from
its package): defaultTest asserts run first, vars merge under the test's, arrays of strings in
vars expand into one test per combination, ``.txt`` prompt files split on ``---`` lines.
"""
from __future__ import annotations

import base64
import glob
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError
from ..spec.models import IMAGE_MAX_BYTES
from ..spec.sourcemap import dotted, line_for, load_yaml, read_text
from .promptfoo_asserts import Refused, map_assert
from .promptfoo_csv import tests_from_csv
from .promptfoo_images import IMAGE_FILES, chat_content, render_images, sniff_image
from .promptfoo_providers import _GEMINI_PARAMS, BROAD_KEYS, fill_body_vars, provider_family
from .template import TemplateUnsupported, is_partial, line_of, prepare_vars, render, render_prompt, variables

PROMPTFOO_VERSION = "0.123.1"  # the version whose behaviour this mirrors (and the tests install)
DEFAULT_GRADER = "gpt-5.6-sol"  # promptfoo 0.123.1's DEFAULT_OPENAI_GRADING_MODEL
OPENAI_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"  # what promptfoo's OpenAI provider reads by default
NO_RUBRIC = ("This item has no rubric of its own (the promptfoo test had no llm-rubric): whatever the output, "
             "give score 1.")

# top-level keys: imported / irrelevant to what is measured (noted) / anything else is refused
_TOP_IMPORTED = {"description", "prompts", "providers", "targets", "tests", "defaultTest"}
_TOP_IGNORED = {"outputPath", "sharing", "evaluateOptions", "commandLineOptions", "writeLatestResults",
                "tags", "metadata", "env", "tracing"}
_TEST_KEYS = {"description", "vars", "assert", "options", "metadata"}
_OPTION_KEYS = {"prefix", "suffix", "provider", "disableDefaultAsserts"}
_PARAMS = {"temperature", "max_tokens", "max_completion_tokens", "top_p", "seed", "stop", "presence_penalty",
           "frequency_penalty", "response_format", "reasoning_effort", "logit_bias"}
# provider config keys that do not change what is sent and answered (why, in the note the import prints)
_DROPPED = {"stream": "evalfarm reads the whole answer; streaming changes the transport, not the text",
            "usage_tier": "promptfoo uses it only to price the call; set the adapter's price"}
_TEXT_FILES = {".txt", ".md", ".j2"}
_CODE_FILES = {".py", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".sh", ".bash", ".rb", ".pl", ".exe", ".bat",
               ".cmd", ".ps1"}


@dataclass(frozen=True)
class Finding:
    """Something the import refused or mapped with a caveat, at a file and line."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        return str(SpecError(self.message, path=self.path, line=self.line, field=self.field or None))


class _Doc:
    """A YAML file and its line map, for findings that name a line."""

    def __init__(self, path: Path, data: Any, lines: dict) -> None:
        self.path, self.data, self.lines = path, data, lines

    def at(self, loc: tuple, message: str, sub: str | None = None) -> Finding:
        full = loc + ((sub,) if sub else ())
        return Finding(str(self.path), line_for(self.lines, full), dotted(full), message)


@dataclass
class _Template:
    label: str
    user: str
    system: str | None
    path: str
    line: int | None
    chat: bool = False
    images: list[dict[str, str]] = field(default_factory=list)  # image parts' templates: {"url"} or {"data", "media_type"}
    default: bool = False  # the config has no prompts: promptfoo sends each test's ``prompt`` var
    ref: str | None = None  # the prompt's id and label as the config wrote them (a provider's ``prompts``
    given_label: str | None = None  # names one of them)


@dataclass
class _Test:
    doc: _Doc
    loc: tuple
    description: str | None
    vars: dict[str, Any]
    asserts: list[tuple[_Doc, tuple, Any]]  # (where, loc, raw assertion)
    prefix: str = ""
    suffix: str = ""
    dropped: bool = False  # something test-level was refused: listed, never rendered


@dataclass
class ImportResult:
    spec: dict[str, Any]
    refused: list[Finding] = field(default_factory=list)
    caveats: list[Finding] = field(default_factory=list)
    mapped: Counter = field(default_factory=Counter)  # assertion type -> how many in the config(s)
    refused_types: Counter = field(default_factory=Counter)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # prompt id -> where it came from


class PromptfooImporter:
    def __init__(self, config: Path) -> None:
        self.config = Path(config)
        self.base = self.config.resolve().parent
        self._refused: dict[Finding, None] = {}
        self._caveats: dict[Finding, None] = {}
        self._mapped: dict[tuple, str] = {}  # (file, line, field) of an assertion -> its type
        self._refused_asserts: dict[tuple, str] = {}
        self._media: dict[str, str] = {}  # an image var's base64 (read from its file) -> its media type
        self._notes: list[str] = []
        self._notes_prompts: list[str] | None = None
        self._wanted: list[tuple[tuple, list[str] | None]] = []  # per imported adapter: (its loc, its prompts)

    # ---- findings -------------------------------------------------------------------------
    def note_endpoint(self, adapter: dict[str, Any], message: str, endpoint: bool = True) -> None:
        """A provider imported with a caveat (an endpoint promptfoo reads from the environment); the
        caller files it at the provider's line."""
        self._notes.append(f"provider {adapter['id']}: {message}")

    def refuse(self, finding: Finding) -> None:
        self._refused.setdefault(finding)

    def caveat(self, finding: Finding) -> None:
        self._caveats.setdefault(finding)

    # ---- files ----------------------------------------------------------------------------
    def _load_doc(self, path: Path) -> _Doc:
        data, lines = load_yaml(read_text(path), path)
        return _Doc(path, data, lines)

    def resolve(self, ref: str) -> list[Path]:
        """``file://`` references (globs too) inside the config's folder; anything outside is refused:
        a config is untrusted data and must not pull arbitrary files into a spec."""
        rel = ref[len("file://"):] if ref.startswith("file://") else ref
        code = re.fullmatch(r"(.+\.(?:py|js|mjs|cjs|ts|mts|cts))(:[A-Za-z_$][\w$.]*)", rel)
        if code:  # file.py:function or file.py:Class.method: the file is named without the function
            target = Path(code.group(1)) if Path(code.group(1)).is_absolute() else self.base / code.group(1)
            if not target.resolve().is_file():
                raise Refused(f"{ref}: file not found ({target.resolve()})")
            raise Refused(f"{ref}: a function reference runs code ({code.group(2)[1:]} in {code.group(1)}); "
                          "evalfarm imports data only")
        pattern = Path(rel) if Path(rel).is_absolute() else self.base / rel
        names = sorted(glob.glob(str(pattern), recursive=True)) if any(c in rel for c in "*?[") else [str(pattern)]
        paths = []
        for name in names:
            path = Path(name).resolve()
            if not path.is_relative_to(self.base):
                raise Refused(f"{ref}: outside the config's folder {self.base}; copy the file next to the config")
            if not path.is_file():
                raise Refused(f"{ref}: file not found ({path})")
            paths.append(path)
        if not paths:
            raise Refused(f"{ref}: no file matches")
        return paths

    def _read(self, path: Path) -> str:
        try:
            return read_text(path)
        except SpecError as exc:
            raise Refused(str(exc)) from None

    def load_value_file(self, ref: str) -> Any:
        """An assertion's ``file://`` value, as promptfoo's processFileReference reads it: JSON/YAML
        parsed, ``.txt`` trimmed; scripts are refused."""
        path = self.resolve(ref)[0]
        if path.suffix == ".txt":
            return self._read(path).strip()
        if path.suffix not in (".json", ".yaml", ".yml"):
            raise Refused(f"{ref}: an assertion value from a {path.suffix or 'extensionless'} file is not "
                          "supported (.json, .yaml, .txt)")
        try:
            return yaml.safe_load(self._read(path))
        except yaml.YAMLError as exc:
            raise Refused(f"{ref}: not parseable ({type(exc).__name__})") from None

    # ---- the config ---------------------------------------------------------------------------
    def run(self) -> ImportResult:
        doc = self._load_doc(self.config)
        if not isinstance(doc.data, dict):
            raise SpecError("a promptfoo config must be a YAML mapping", path=str(self.config), line=1)
        if "redteam" in doc.data and not doc.data.get("tests"):
            # `promptfoo redteam` generates the tests from plugins and strategies: there is no suite to import
            raise SpecError("redteam: a red-team config is not an eval of a fixed suite (promptfoo redteam "
                            "generate writes its tests); evalfarm does not import it: import the generated "
                            "redteam.yaml", path=str(self.config), line=line_for(doc.lines, ("redteam",)))
        for key in doc.data:
            if key == "redteam":  # generated tests are here: they are imported, the generator's settings are not
                self.refuse(doc.at((key,), "redteam: the red-team plugins and strategies are not imported (the "
                                           "tests they generated are)"))
            elif key in _TOP_IGNORED:
                self.caveat(doc.at((key,), "not imported (it does not change what is measured)"
                                   + ("; set keys in your environment, never in a spec" if key == "env" else "")))
            elif key not in _TOP_IMPORTED:
                self.refuse(doc.at((key,), f"top-level key {key!r} is not supported by the importer"))
        if "providers" in doc.data and "targets" in doc.data:
            self.refuse(doc.at(("targets",), "give 'providers' or 'targets', not both"))
        adapters = self._providers(doc)
        templates = self._prompts(doc)
        adapters, templates = self._provider_prompts(doc, adapters, templates)
        default, grader = self._default_test(doc)
        tests = self._tests(doc, default)
        adapters = self._fill_body_vars(doc, adapters, tests)
        prompts, items = self._render_all(templates, tests)
        spec: dict[str, Any] = {"name": self._name(doc), "adapters": adapters, "prompts": prompts}
        if any(p.get("criteria") for p in prompts):
            if grader is None:
                grader = {"model": DEFAULT_GRADER, "provider": "openai", "base_url": OPENAI_URL,
                          "api_key_env": OPENAI_KEY_ENV}
            # promptfoo passes a test only when every assertion passes: every criterion must pass
            spec["judge"] = {**grader, "pass_score": 1.0}
            unjudged = [p["id"] for p in prompts if not p.get("criteria")]
            if unjudged:
                # evalfarm judges every item of a spec with a judge; promptfoo grades only tests with
                # llm-rubric. The rubric makes those judge calls a formality (still paid for).
                spec["judge"]["rubric"] = NO_RUBRIC
                self.caveat(Finding(str(self.config), None, "judge",
                                    f"{len(unjudged)} prompt(s) have no llm-rubric but evalfarm judges every item "
                                    "when a spec has a judge: they get a rubric that asks for score 1 (extra "
                                    "judge calls; proposed: judge only items with criteria)"))
        return ImportResult(spec=spec, refused=list(self._refused), caveats=list(self._caveats),
                            mapped=Counter(self._mapped.values()),
                            refused_types=Counter(self._refused_asserts.values()), items=items)

    def _name(self, doc: _Doc) -> str:
        desc = doc.data.get("description")
        if isinstance(desc, str) and desc.strip():
            return desc.strip()
        return f"promptfoo-{self.base.name or 'import'}"

    # ---- providers ------------------------------------------------------------------------------
    def _providers(self, doc: _Doc) -> list[dict[str, Any]]:
        key = "targets" if "targets" in doc.data and "providers" not in doc.data else "providers"
        raw = doc.data.get(key)
        if raw is None:
            self.refuse(doc.at((), "the config has no 'providers'", sub="providers"))
            return []
        entries = raw if isinstance(raw, list) else [raw]
        adapters: list[dict[str, Any]] = []
        for i, entry in enumerate(entries):
            loc = (key, i) if isinstance(raw, list) else (key,)
            self._notes, self._notes_prompts = [], None
            try:
                adapter = self.provider(entry)
            except Refused as exc:
                self.refuse(doc.at(loc, str(exc), sub=exc.field))
                continue
            for note in self._notes:
                self.caveat(doc.at(loc, note))
            self._wanted.append((loc, self._notes_prompts))
            self._notes_prompts = None
            base_id, n = adapter["id"], 2
            while any(a["id"] == adapter["id"] for a in adapters):
                adapter["id"], n = f"{base_id}-{n}", n + 1
            adapters.append(adapter)
        return adapters

    def provider(self, entry: Any) -> dict[str, Any]:
        """One promptfoo provider as an evalfarm adapter: OpenAI chat and the OpenAI-compatible services,
        Anthropic Messages, Gemini (Google AI Studio, Vertex), OpenAI Responses, Azure OpenAI, and the
        ``http`` provider's JSON form (see ``providers.py`` next to this module for the table)."""
        if isinstance(entry, dict) and len(entry) == 1 and "id" not in entry:
            (pid, body), = entry.items()  # the {"openai:chat:x": {config: ...}} form
            entry = {"id": pid, **(body if isinstance(body, dict) else {})}
        if isinstance(entry, str):
            entry = {"id": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise Refused("a provider must be an id string or a mapping with an 'id'")
        if "delay" in entry:  # promptfoo's pause between calls: evalfarm has its own limits (requests_per_minute)
            entry = {k: v for k, v in entry.items() if k != "delay"}
            self._notes.append(f"provider {entry.get('id')}: delay is not imported (set requests_per_minute)")
        extra = sorted(set(entry) - {"id", "label", "config", "prompts"})
        if extra:
            raise Refused(f"provider key {extra[0]!r} is not supported", field=extra[0])
        pid = entry["id"]
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise Refused("config must be a mapping", field="config")
        family = provider_family(pid)
        adapter: dict[str, Any] = {"id": entry.get("label") or pid, "provider": family.provider,
                                   "model": family.model}
        if "prompts" in entry:  # the prompts this provider runs (labels or ids); _provider_prompts applies them
            names = entry["prompts"] if isinstance(entry["prompts"], list) else [entry["prompts"]]
            if not names or not all(isinstance(n, str) and n for n in names):
                raise Refused("prompts must be a list of prompt labels or ids", field="prompts")
            self._notes_prompts = names
        if family.base_url is not None:
            adapter["base_url"] = family.base_url
        if family.key_env:
            adapter["api_key_env"] = family.key_env
        if not isinstance(adapter["id"], str) or not adapter["id"].strip():
            raise Refused("label must be a non-empty string", field="label")
        params: dict[str, Any] = {}
        place: dict[str, Any] = {}
        for key, value in config.items():
            if key in family.place_keys:
                place[key] = value
            elif key == "apiBaseUrl" and family.provider not in ("http",):
                if not isinstance(value, str) or not re.match(r"https?://[^/\s]+", value):
                    raise Refused("config.apiBaseUrl must be an http(s):// URL", field="config")
                adapter["base_url"] = value.rstrip("/")
            elif key == "apiHost" and family.provider in ("openai", "anthropic"):
                if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", value):
                    raise Refused("config.apiHost must be a host name", field="config")
                adapter["base_url"] = f"https://{value}/v1"
            elif key == "apiKeyEnvar":
                if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
                    raise Refused("config.apiKeyEnvar must be an environment variable name", field="config")
                adapter["api_key_env"] = value
            elif key == "apiKey":
                # never echo the value: it is a secret
                raise Refused("config.apiKey holds a key in the config; evalfarm reads keys from the "
                              "environment only: put it in a variable and name it with config.apiKeyEnvar",
                              field="config")
            elif key in _DROPPED or key in family.dropped:
                why = family.dropped.get(key) or _DROPPED[key]
                self._notes.append(f"provider {adapter['id']}: config.{key} is not imported ({why})")
            elif key == "passthrough" and family.provider in ("openai", "azure", "openai-responses"):
                if not isinstance(value, dict):
                    raise Refused("config.passthrough must be a mapping (fields added to the request body)",
                                  field="config")
                params.update(value)  # promptfoo spreads it into the request body
            elif key in family.tool_keys:
                # tools are written in the provider's own format; the wire puts them where its API reads them
                params[key] = self._tool_value(value, key)
            elif key in _PARAMS or key in family.param_names or family.any_params:
                params[family.param_names.get(key, key)] = value
            elif key == "generationConfig" and family.provider in ("gemini", "vertex") and isinstance(value, dict):
                for k, v in value.items():  # unknown keys pass through into generationConfig (wire: gemini)
                    params[_GEMINI_PARAMS.get(k, k)] = v
            else:
                raise Refused(f"config.{key} is not supported by the importer for {family.provider} providers",
                              field="config")
        family.finish(adapter, place, params, self)
        if adapter.get("api_key_env") in BROAD_KEYS:
            self.note_endpoint(adapter, f"{adapter['api_key_env']} opens more than a model API, so evalfarm's "
                                        "default key allow-list leaves it out: add it to EVALFARM_KEY_ENV_ALLOW "
                                        "where the calls run", endpoint=False)
        if params:
            adapter["params"] = params
        return adapter

    def _tool_value(self, value: Any, key: str) -> Any:
        """A tool definition inline or in a ``file://`` JSON/YAML file (promptfoo loads it the same way)."""
        if isinstance(value, str) and value.startswith("file://"):
            value = self.load_value_file(value)
        if not isinstance(value, (list, dict, str)) or (isinstance(value, str) and key in ("tools", "functions")):
            raise Refused(f"config.{key} must be a list or mapping (or a file:// JSON/YAML file)", field="config")
        return value

    def _fill_body_vars(self, doc: _Doc, adapters: list[dict], tests: list[_Test]) -> list[dict]:
        combos = [combo for t in tests if not t.dropped for combo in _combinations(t.vars)]
        kept = []
        for adapter, (loc, _) in zip(adapters, self._wanted):
            try:
                fill_body_vars(adapter, combos)
            except Refused as exc:
                self.refuse(doc.at(loc, str(exc), sub=exc.field))
                continue
            kept.append(adapter)
        self._wanted = [w for a, w in zip(adapters, self._wanted) if any(a is k for k in kept)]
        return kept

    def _provider_prompts(self, doc: _Doc, adapters: list[dict], templates: list[_Template]
                          ) -> tuple[list[dict], list[_Template]]:
        """A provider's ``prompts`` (labels, ids, ``label:*`` prefixes) restricts it to those prompts. evalfarm
        runs every prompt on every adapter: the first provider's prompts are imported, and a provider that
        runs a different set is refused by name."""
        if all(names is None for _, names in self._wanted):
            return adapters, templates

        def runs(names: list[str] | None) -> list[int]:
            if names is None:
                return list(range(len(templates)))
            return [i for i, t in enumerate(templates)
                    if any(n in (t.label, t.ref, t.given_label)
                           or (n.endswith("*") and (t.given_label or t.label).startswith(n[:-1])) for n in names)]

        chosen = runs(self._wanted[0][1])
        kept = []
        for adapter, (loc, names) in zip(adapters, self._wanted):
            mine = runs(names)
            if mine == chosen:
                kept.append(adapter)
                continue
            shown = ", ".join((templates[i].given_label or templates[i].label)[:40] for i in chosen) or "none"
            self.refuse(doc.at(loc, f"provider {adapter['id']} runs other prompts than the first provider ({shown}): "
                                    "evalfarm runs every prompt on every adapter; import such providers from a "
                                    "config of their own", sub="prompts"))
        self._wanted = [w for a, w in zip(adapters, self._wanted) if any(a is k for k in kept)]
        if len(chosen) < len(templates):
            self.caveat(doc.at(("prompts",), f"{len(templates) - len(chosen)} prompt(s) no imported provider runs "
                                             "are not imported"))
        return kept, [templates[i] for i in chosen]

    # ---- prompts -------------------------------------------------------------------------------------
    def _prompts(self, doc: _Doc) -> list[_Template]:
        raw = doc.data.get("prompts")
        if raw is None:  # promptfoo's default (util/config/load.ts): the prompt is the test's `prompt` var
            self.caveat(doc.at((), "the config has no 'prompts': each test's 'prompt' var is the prompt, as "
                                   "promptfoo does", sub="prompts"))
            return [_Template(label="{{prompt}}", user="{{prompt}}", system=None, path=str(doc.path),
                              line=None, default=True)]
        if isinstance(raw, dict):  # legacy form: {path or text: label}
            entries = [((k,), {"raw": k, "label": v}) for k, v in raw.items()]
        elif isinstance(raw, list):
            entries = [((i,), e) for i, e in enumerate(raw)]
        else:
            entries = [((), raw)]
        templates: list[_Template] = []
        for sub, entry in entries:
            loc = ("prompts", *sub)
            try:
                ref = entry.get("id", entry.get("raw")) if isinstance(entry, dict) else entry
                given = entry.get("label") if isinstance(entry, dict) else None
                templates += [_with_ref(t, ref, given) for t in self._prompt_entry(entry, doc, loc)]
            except _Located as exc:
                self.refuse(Finding(exc.path, exc.line, dotted(loc), str(exc)))
            except Refused as exc:
                self.refuse(doc.at(loc, str(exc), sub=exc.field))
        return templates

    def _prompt_entry(self, entry: Any, doc: _Doc, loc: tuple) -> list[_Template]:
        label = None
        if isinstance(entry, dict):
            extra = sorted(set(entry) - {"raw", "id", "label"})
            if extra:
                raise Refused(f"prompt key {extra[0]!r} is not supported", field=extra[0])
            label, entry = entry.get("label"), entry.get("raw", entry.get("id"))
        if not isinstance(entry, str):
            raise Refused("a prompt must be a string, a file:// reference or a mapping with raw/id")
        line = line_for(doc.lines, loc)
        if not entry.startswith("file://"):
            if not maybe_file_path(entry):
                return [self._template(entry, label or entry, str(doc.path), line, line_in_text=False)]
            try:  # promptfoo reads such a string as a file path, file:// or not
                paths = self.resolve(entry)
            except Refused as exc:
                if "*" in entry and "no file matches" in str(exc):
                    return [self._template(entry, label or entry, str(doc.path), line, line_in_text=False)]
                raise Refused(f"promptfoo reads the prompt {entry!r} as a file path (it has a '/', '\\', '*' or "
                              f"a file extension), and: {exc}") from None
        else:
            paths = self.resolve(entry)
        out = []
        for path in paths:
            rel = str(path.relative_to(self.base))
            shown = str(self.config.parent / rel)  # as the user would type it, next to the config
            suffix = path.suffix.lower()
            if suffix in _CODE_FILES:
                raise Refused(f"{rel}: a prompt function runs code; evalfarm imports data only")
            text = self._read(path)
            if suffix == ".txt":
                start = 1
                parts: list[tuple[str, int]] = []
                buf: list[str] = []
                for n, ln in enumerate(text.split("\n"), start=1):
                    if ln.rstrip("\r").strip() == "---":
                        parts.append(("\n".join(buf), start))
                        buf, start = [], n + 1
                    else:
                        buf.append(ln.rstrip("\r"))
                parts.append(("\n".join(buf), start))
                for body, first in parts:
                    lead = len(body) - len(body.lstrip())
                    body_line = first + body[:lead].count("\n")
                    if not body.strip():
                        continue
                    try:  # each part stands alone: one bad part does not hide the others
                        out.append(self._template(body.strip(), f"{rel}: {body.strip()}", shown, body_line))
                    except _Located as exc:
                        self.refuse(Finding(exc.path, exc.line, dotted(loc), str(exc)))
            elif suffix in (".md", ".j2", ".json"):
                out.append(self._template(text, label or rel, shown, 1))
            elif suffix in (".yaml", ".yml"):
                try:
                    data = yaml.safe_load(text)
                except yaml.YAMLError as exc:
                    raise Refused(f"{rel}: invalid YAML ({type(exc).__name__})") from None
                out.append(self._template(json.dumps(data, ensure_ascii=False, separators=(",", ":")),
                                          label or rel, shown, 1, line_in_text=False))
            else:
                raise Refused(f"{rel}: prompt files of type {suffix or '(none)'!r} are not supported "
                              "(.txt, .md, .j2, .json, .yaml)")
        return out

    def _template(self, text: str, label: str, path: str, line: int | None, line_in_text: bool = True) -> _Template:
        """Check a prompt template once (not per test); a chat prompt becomes system + user."""
        system, user, chat = None, text, False
        if text.strip().startswith("- role:"):
            raise Refused("an inline YAML chat prompt is not supported: put the messages in a .yaml or .json file")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = _NOT_JSON
        if parsed is not _NOT_JSON:  # promptfoo renders a JSON prompt value by value, then re-serialises it
            if not isinstance(parsed, list):
                raise Refused("a JSON prompt that is not a list of chat messages is not supported")
            system, user, images = _chat(parsed)
            chat = True
            for image in images:
                try:
                    variables(image.get("url") or image.get("data") or "")
                except TemplateUnsupported as exc:
                    raise _Located(str(exc), path, line) from None
        elif is_partial(text):
            return _Template(label=label, user=user, system=None, path=path, line=line)  # sent as written
        for part in (system, user):
            if part is None:
                continue
            try:
                variables(part)
            except TemplateUnsupported as exc:
                where = (line or 1) + line_of(part, exc.offset) - 1 if line_in_text and part is text else line
                raise _Located(str(exc), path, where) from None
        return _Template(label=label, user=user, system=system, path=path, line=line, chat=chat,
                         images=images if chat else [])

    # ---- tests ------------------------------------------------------------------------------------
    def _default_test(self, doc: _Doc) -> tuple[_Test | None, dict[str, Any] | None]:
        raw = doc.data.get("defaultTest")
        if raw is None:
            return None, None
        if not isinstance(raw, dict):
            self.refuse(doc.at(("defaultTest",), "defaultTest must be a mapping (a file:// defaultTest is not "
                                                  "supported)"))
            return None, None
        grader = None
        options = raw.get("options") or {}
        if isinstance(options, dict) and "provider" in options:
            try:
                grader = self._grader(options["provider"])
            except Refused as exc:
                self.refuse(doc.at(("defaultTest", "options", "provider"), str(exc)))
        test = self._test(raw, doc, ("defaultTest",), None, is_default=True)
        return test, grader

    def _grader(self, entry: Any) -> dict[str, Any]:
        adapter = self.provider(entry)
        if adapter["provider"] in ("azure", "http"):
            raise Refused(f"grader provider {adapter['provider']}: evalfarm's judge block has no api_version or "
                          "http fields (an OpenAI-compatible, anthropic, gemini, vertex, openai:responses or "
                          "bedrock grader is supported)")
        adapter.pop("id")
        return adapter

    def _tests(self, doc: _Doc, default: _Test | None) -> list[_Test]:
        raw = doc.data.get("tests")
        sources: list[tuple[_Doc, tuple, Any]] = []
        if raw is None:
            return [default or _Test(doc, ("defaultTest",), None, {}, [])]
        entries = raw if isinstance(raw, list) else [raw]
        for i, entry in enumerate(entries):
            loc = ("tests", i) if isinstance(raw, list) else ("tests",)
            if isinstance(entry, str):
                try:
                    sources += self._test_file(entry)
                except Refused as exc:
                    self.refuse(doc.at(loc, str(exc)))
            else:
                sources.append((doc, loc, entry))
        tests = []
        for src_doc, loc, entry in sources:
            test = self._test(entry, src_doc, loc, default)
            if test is not None:
                tests.append(test)
        return tests

    def _test_file(self, ref: str) -> list[tuple[_Doc, tuple, Any]]:
        if not ref.startswith("file://"):
            raise Refused(f"{ref!r}: a test entry must be a mapping or a file:// reference")
        out = []
        for path in self.resolve(ref):
            if path.suffix == ".csv":
                rows = tests_from_csv(self._read(path))
                lines = {(i,): line for i, (line, _) in enumerate(rows)}
                tdoc = _Doc(path, [t for _, t in rows], lines)
                out += [(tdoc, (i,), t) for i, (_, t) in enumerate(rows)]
                continue
            if path.suffix == ".jsonl":  # one test per non-empty line
                rows = []
                for n, line in enumerate(self._read(path).splitlines(), start=1):
                    if line.strip():
                        try:
                            rows.append((n, json.loads(line)))
                        except ValueError:
                            raise Refused(f"{path.name}:{n}: not a JSON object") from None
                tdoc = _Doc(path, [t for _, t in rows], {(i,): n for i, (n, _) in enumerate(rows)})
                out += [(tdoc, (i,), t) for i, (_, t) in enumerate(rows)]
                continue
            if path.suffix not in (".yaml", ".yml", ".json"):
                raise Refused(f"{path.name}: test files of type {path.suffix!r} are not supported (.yaml, .json, "
                              ".jsonl, .csv)")
            try:
                tdoc = self._load_doc(path)
            except SpecError as exc:
                raise Refused(str(exc)) from None
            if not isinstance(tdoc.data, list):
                raise Refused(f"{path.name}: a tests file must hold a list of tests")
            out += [(tdoc, (i,), t) for i, t in enumerate(tdoc.data)]
        return out

    def _test(self, raw: Any, doc: _Doc, loc: tuple, default: _Test | None, is_default: bool = False) -> _Test | None:
        if not isinstance(raw, dict):
            self.refuse(doc.at(loc, "a test must be a mapping"))
            return None
        ok = True
        for key in raw:
            if key not in _TEST_KEYS:
                why = " (a test-level threshold weighs assertions; evalfarm needs every check to pass)" \
                    if key == "threshold" else ""
                self.refuse(doc.at(loc + (key,), f"test key {key!r} is not supported{why}"))
                ok = False
        desc = raw.get("description")
        variables_ = dict(default.vars) if default else {}
        vars_raw = raw.get("vars") or {}
        if not isinstance(vars_raw, dict):
            self.refuse(doc.at(loc + ("vars",), "vars must be a mapping"))
            return None
        for name, value in vars_raw.items():
            try:
                variables_[name] = self._var(value)
            except Refused as exc:
                self.refuse(doc.at(loc + ("vars", name), str(exc)))
                ok = False
        options = raw.get("options") or {}
        if not isinstance(options, dict):
            self.refuse(doc.at(loc + ("options",), "options must be a mapping"))
            ok = False
            options = {}
        for key, value in options.items():
            if key not in _OPTION_KEYS:
                self.refuse(doc.at(loc + ("options", key), f"test option {key!r} is not supported"))
                ok = False
            elif key in ("prefix", "suffix") and not isinstance(value, str):
                self.refuse(doc.at(loc + ("options", key), f"{key} must be a string"))
                ok = False
            elif key == "provider" and not is_default:
                self.refuse(doc.at(loc + ("options", key), "a per-test grader is not supported: evalfarm has "
                                                           "one judge per spec (set defaultTest.options.provider)"))
                ok = False
        prefix, suffix = options.get("prefix", "") or "", options.get("suffix", "") or ""
        if default and not is_default:
            prefix, suffix = prefix or default.prefix, suffix or default.suffix
        disable_default = options.get("disableDefaultAsserts") is True
        asserts_raw = raw.get("assert") or []
        if not isinstance(asserts_raw, list):
            self.refuse(doc.at(loc + ("assert",), "assert must be a list"))
            return None
        asserts = [] if (default is None or disable_default) else list(default.asserts)
        asserts += [(doc, loc + ("assert", j), a) for j, a in enumerate(asserts_raw)]
        # rendered without what was refused, its verdict would not be promptfoo's: drop it
        return _Test(doc, loc, desc if isinstance(desc, str) else None, variables_, asserts, prefix, suffix,
                     dropped=not ok and not is_default)

    def _var(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("file://"):
            texts = [self._var_file(p) for p in self.resolve(value)]
            return texts if len(texts) > 1 else texts[0]
        if isinstance(value, list):
            if all(isinstance(v, str) for v in value):
                return [self._var(v) if v.startswith("file://") else v for v in value]
            raise Refused("a list var must hold strings (promptfoo expands them into one test each)")
        if isinstance(value, dict):
            raise Refused("an object var is not supported (promptfoo renders it through Nunjucks)")
        return value

    def _var_file(self, path: Path) -> str:
        suffix = path.suffix.lower()
        if suffix in _CODE_FILES:
            raise Refused(f"{path.name}: a var from a script runs code; evalfarm imports data only")
        if suffix in (".yaml", ".yml"):
            try:
                return json.dumps(yaml.safe_load(self._read(path)), ensure_ascii=False, separators=(",", ":"))
            except yaml.YAMLError as exc:
                raise Refused(f"{path.name}: invalid YAML ({type(exc).__name__})") from None
        if suffix in IMAGE_FILES:  # promptfoo loads an image var as its base64
            try:
                raw = path.read_bytes() if path.stat().st_size <= IMAGE_MAX_BYTES else None
            except OSError as exc:
                raise Refused(f"{path.name}: cannot read ({exc.strerror})") from None
            if raw is None:
                raise Refused(f"{path.name}: an image var larger than {IMAGE_MAX_BYTES // 2**20} MB")
            media = sniff_image(raw)
            if media is None:
                raise Refused(f"{path.name}: not a JPEG, PNG, GIF or WebP image")
            data = base64.b64encode(raw).decode("ascii")
            self._media[data] = media
            return data
        if suffix in (".pdf", ".mp3", ".wav", ".mp4"):
            raise Refused(f"{path.name}: media vars other than images are not supported")
        return self._read(path).strip()

    # ---- rendering -----------------------------------------------------------------------------------
    def _render_all(self, templates: list[_Template], tests: list[_Test]) -> tuple[list[dict], dict]:
        prompts: list[dict[str, Any]] = []
        items: dict[str, dict[str, Any]] = {}
        seen_ids: set[str] = set()
        expanded = []
        for test in tests:
            self._list_refused_asserts(test)  # listed even when no prompt renders
            if not test.dropped:
                expanded += [(test, combo) for combo in _combinations(test.vars)]
        for t_index, (test, combo) in enumerate(expanded):
            for p_index, tpl in enumerate(templates):
                pid = f"t{t_index + 1:0{len(str(len(expanded)))}d}"
                if test.description:
                    slug = re.sub(r"[^a-z0-9]+", "-", test.description.lower()).strip("-")[:40]
                    pid += f"-{slug}" if slug else ""
                if len(templates) > 1:
                    pid += f".p{p_index + 1}"
                base, n = pid, 2
                while pid in seen_ids:
                    pid, n = f"{base}-{n}", n + 1
                seen_ids.add(pid)
                prompt = self._render_one(pid, tpl, test, combo)
                if prompt is None:
                    seen_ids.discard(pid)
                    continue
                prompts.append(prompt)
                items[pid] = {"test_index": t_index, "prompt_index": p_index, "vars": combo,
                              "asserts": prompt.pop("_asserts")}
        return prompts, items

    def _list_refused_asserts(self, test: _Test) -> None:
        """Every test's assertions are checked up front, so one import lists every refusal."""
        combo = prepare_vars(next(iter(_combinations(test.vars)), {}))
        for adoc, aloc, raw in test.asserts:
            try:
                map_assert(raw, combo, self.load_value_file, 1)
            except Refused as exc:
                self.refuse(adoc.at(aloc, str(exc), sub=exc.field))
                self._refused_asserts[(str(adoc.path), aloc)] = str(raw.get("type") if isinstance(raw, dict) else None)

    def _render_one(self, pid: str, tpl: _Template, test: _Test, combo: dict[str, Any]) -> dict[str, Any] | None:
        if (test.prefix or test.suffix) and tpl.chat:
            self.refuse(test.doc.at(test.loc, "options.prefix/suffix on a chat prompt: promptfoo then sends the "
                                              "JSON as text; not supported", sub="options"))
            return None
        if tpl.default and not isinstance(combo.get("prompt"), str):
            self.refuse(test.doc.at(test.loc, "the config has no 'prompts' and this test no 'prompt' var: "
                                              "there is nothing to send", sub="vars"))
            return None
        values = prepare_vars(combo)
        system = None
        try:
            if tpl.chat:
                user, missing = render(tpl.user, values)
                if tpl.system is not None:
                    system, more = render(tpl.system, values)
                    missing += more
            else:  # promptfoo renders prefix + template + suffix as one template
                user, missing = render_prompt(f"{test.prefix}{tpl.user}{test.suffix}", values)
        except TemplateUnsupported as exc:
            self.refuse(test.doc.at(test.loc, str(exc), sub="vars"))
            return None
        if missing:
            self.caveat(Finding(tpl.path, tpl.line, "prompts",
                                f"variable(s) {', '.join(sorted(set(missing)))} have no value in some tests; "
                                "rendered empty, as promptfoo does"))
        try:
            user, images = render_images(tpl.images, user, values, self._media)
        except Refused as exc:
            self.refuse(test.doc.at(test.loc, str(exc), sub="vars"))
            return None
        prompt: dict[str, Any] = {"id": pid, "text": user}
        if system is not None:
            prompt["system"] = system
        if images:
            prompt["images"] = images
        checks, criteria, mapped = [], [], []
        for adoc, aloc, raw in test.asserts:
            kind = raw.get("type") if isinstance(raw, dict) else None
            try:
                result = map_assert(raw, values, self.load_value_file, len(criteria) + 1)
            except Refused as exc:
                self.refuse(adoc.at(aloc, str(exc), sub=exc.field))
                self._refused_asserts[(str(adoc.path), aloc)] = str(kind)
                continue
            for note in result.caveats:
                self.caveat(adoc.at(aloc, f"{kind}: {note}"))
            self._mapped[(str(adoc.path), aloc)] = str(kind)
            checks += result.checks
            criteria += result.criteria
            mapped.append({"type": kind, "line": line_for(adoc.lines, aloc), "path": str(adoc.path),
                           "checks": len(result.checks), "criteria": [c["id"] for c in result.criteria]})
        if checks:
            prompt["checks"] = checks
        if criteria:
            prompt["criteria"] = criteria
        prompt["_asserts"] = mapped
        return prompt


class _Located(Refused):
    """A refusal inside a prompt file: it names that file's line, not the config's."""

    def __init__(self, message: str, path: str, line: int | None) -> None:
        super().__init__(message)
        self.path, self.line = path, line


_NOT_JSON = object()
_FILE_EXTENSIONS = (".cjs", ".cts", ".j2", ".js", ".json", ".jsonl", ".md", ".mjs", ".mts", ".py", ".ts", ".txt",
                    ".yml", ".yaml")


def _with_ref(tpl: _Template, ref: Any, label: Any) -> _Template:
    tpl.ref = ref if isinstance(ref, str) else None
    tpl.given_label = label if isinstance(label, str) else None
    return tpl


def maybe_file_path(text: str) -> bool:
    """promptfoo's test for "this prompt string is a file path" (src/prompts/utils.ts)."""
    if any(s in text for s in ("\n", "portkey://", "langfuse://", "helicone://")):
        return False
    tokens = text.split(":")
    last, before = tokens[-1], tokens[-2] if len(tokens) > 1 else ""
    return (text.startswith("file://") or any(last.endswith(e) or before.endswith(e) for e in _FILE_EXTENSIONS)
            or text[-3:-2] == "." or text[-4:-3] == "." or any(c in text for c in "*/\\"))


def _chat(messages: list) -> tuple[str | None, str, list[dict[str, str]]]:
    """(system, user text, the user message's image templates) of a JSON chat prompt."""
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
               for m in messages):
        raise Refused("a chat prompt must be a list of {role, content} messages with string content or content "
                      "parts (text and images)")
    roles = [m["role"] for m in messages]
    if roles == ["user"]:
        return (None, *chat_content(messages[0]["content"]))
    if roles == ["system", "user"]:
        system, images = chat_content(messages[0]["content"])
        if images:
            raise Refused("an image in a system message is not supported: put it in the user message")
        return (system, *chat_content(messages[1]["content"]))
    raise Refused(f"a chat prompt with roles {roles}: evalfarm sends one optional system message and "
                  "one user message")


def _combinations(values: dict[str, Any]) -> list[dict[str, Any]]:
    """promptfoo's expansion: every list of strings multiplies the tests, in key order."""
    keys = list(values)
    options = [values[k] if isinstance(values[k], list) else [values[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*options)]


def import_config(config: Path) -> ImportResult:
    """Import a promptfoo config; raises SpecError for a config that cannot be read at all."""
    return PromptfooImporter(config).run()
