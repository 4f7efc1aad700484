"""The agent script of `evalfarm mock-provider --agent-script FILE`, and how a step becomes a tool call.

The script (YAML) is a list of steps: ``read: FILE``, ``edit: {file, old, new}``, ``shell: CMD`` and
``say: TEXT``, each with optional ``usage: {input_tokens, output_tokens}``. The reply to a request is
chosen statelessly from how many tool results the request already holds (step N answers a request
holding N results). Argument names are taken from the tool schema the agent sent; relative paths
become absolute under the working directory the agent states in its prompt.

An edit means one thing to every agent, Claude Code's Edit semantics: ``old`` is text that occurs
exactly once in the file, matched by content (a part of a line or several lines), and only that text
becomes ``new``; the rest of its lines, indentation included, stays. Agents whose edit tool works on
whole lines (Codex's apply_patch, aider's SEARCH/REPLACE) get the whole lines around ``old`` with the
replacement inside them (``whole_lines``, reading the file where the agent works, on this host); when
the mock cannot read it, Codex edits through its shell with the same exactly-once replacement.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEP_KINDS = ("read", "edit", "shell", "say")
DEFAULT_USAGE = (123, 45)
TOOL_NAMES = {
    "read": ("Read", "read", "read_file"),
    "edit": ("Edit", "edit", "replace"),
    "shell": ("Bash", "bash", "run_shell_command", "shell_command", "exec_command", "shell"),
}
ARG_NAMES = {
    "path": ("file_path", "filePath", "absolute_path", "path"),
    "old": ("old_string", "oldString", "old_str"),
    "new": ("new_string", "newString", "new_str"),
    "command": ("command", "cmd"),
}
# Where each agent states its working directory in the prompt it sends.
_CWD_PATTERNS = [re.compile(p) for p in (
    r"<cwd>([^<]+)</cwd>",                                   # codex environment_context
    r"[Pp]rimary working directory: (/[^\s\"\\]+)",          # claude
    r"[Ww]orking directory: (/[^\s\"\\]+)",                  # claude, opencode
    r"Workspace Directories:\*\*\\n\s*- (/[^\s\"\\]+)",     # gemini 0.61
    r"working in the directory: (/[^\s\"\\]+)",              # gemini (older)
)]
TOOL_RESULT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


@dataclass(frozen=True)
class Step:
    kind: str
    line: int
    usage: tuple[int, int]
    path: str = ""
    old: str = ""
    new: str = ""
    command: str = ""
    text: str = ""


@dataclass(frozen=True)
class AgentScript:
    steps: tuple[Step, ...]
    side_usage: tuple[int, int] = DEFAULT_USAGE

    def step(self, n_results: int) -> tuple[int, Step]:
        """The step answering a request that already holds ``n_results`` tool results."""
        if n_results < len(self.steps):
            return n_results, self.steps[n_results]
        last = self.steps[-1]
        if last.kind == "say":
            return len(self.steps) - 1, last
        return len(self.steps), Step("say", last.line, last.usage, text="Done.")


def _usage(value: Any, where: str, default: tuple[int, int]) -> tuple[int, int]:
    if value is None:
        return default
    if (not isinstance(value, dict) or set(value) - {"input_tokens", "output_tokens"}
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values())):
        raise ValueError(f"{where}: usage: expected {{input_tokens: N, output_tokens: N}} (integers >= 0)")
    return int(value.get("input_tokens", default[0])), int(value.get("output_tokens", default[1]))


def load_agent_script(path: Path) -> AgentScript:
    """Parse and validate a script; errors are one line, ``file:line: field: what to do``."""
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise ValueError(f"{path}:1: steps: expected a mapping with a non-empty list `steps:`")
    unknown = set(data) - {"steps", "usage", "side_usage"}
    if unknown:
        raise ValueError(f"{path}:1: {sorted(unknown)[0]}: unknown key (expected steps, usage, side_usage)")
    default = _usage(data.get("usage"), f"{path}:1", DEFAULT_USAGE)
    side = _usage(data.get("side_usage"), f"{path}:1", default)
    steps_node = next(v for k, v in root.value if k.value == "steps")
    steps = []
    for i, (raw, node) in enumerate(zip(data["steps"], steps_node.value)):
        where = f"{path}:{node.start_mark.line + 1}: steps[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected a mapping like {{read: FILE}}")
        kinds = [k for k in raw if k in STEP_KINDS]
        extra = set(raw) - set(STEP_KINDS) - {"usage"}
        if len(kinds) != 1 or extra:
            raise ValueError(f"{where}: expected exactly one of {', '.join(STEP_KINDS)} (and optional usage)")
        kind, arg = kinds[0], raw[kinds[0]]
        usage = _usage(raw.get("usage"), where, default)
        line = node.start_mark.line + 1
        if kind == "edit":
            if not (isinstance(arg, dict) and set(arg) == {"file", "old", "new"}
                    and all(isinstance(v, str) and v for v in (arg["file"], arg["old"])) and isinstance(arg["new"], str)):
                raise ValueError(f"{where}: edit: expected {{file: PATH, old: TEXT, new: TEXT}}")
            steps.append(Step("edit", line, usage, path=arg["file"], old=arg["old"], new=arg["new"]))
        elif not isinstance(arg, str) or not arg:
            raise ValueError(f"{where}: {kind}: expected a non-empty string")
        elif kind == "read":
            steps.append(Step("read", line, usage, path=arg))
        elif kind == "shell":
            steps.append(Step("shell", line, usage, command=arg))
        else:
            steps.append(Step("say", line, usage, text=arg))
    return AgentScript(tuple(steps), side)


def find_cwd(body: Any) -> str | None:
    text = json.dumps(body)
    for pattern in _CWD_PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1).replace("\\n", "").rstrip(".,")
    return None


def abs_path(path: str, cwd: str | None) -> str:
    return path if path.startswith("/") or not cwd else f"{cwd.rstrip('/')}/{path}"


def schema_args(schema: dict[str, Any] | None, step: Step, cwd: str | None) -> dict[str, Any]:
    """The step's arguments under the names the agent's tool schema uses; required strings filled."""
    props = (schema or {}).get("properties") or {}
    values = {"path": abs_path(step.path, cwd), "old": step.old, "new": step.new, "command": step.command}
    wanted = {"read": ("path",), "edit": ("path", "old", "new"), "shell": ("command",)}[step.kind]
    args: dict[str, Any] = {}
    for key in wanted:
        name = next((n for n in ARG_NAMES[key] if n in props), ARG_NAMES[key][0])
        value: Any = values[key]
        if key == "command" and (props.get(name) or {}).get("type") == "array":
            value = ["bash", "-lc", value]
        args[name] = value
    for name in (schema or {}).get("required") or []:
        if name not in args and (props.get(name) or {}).get("type", "string") == "string":
            args[name] = f"scripted {step.kind} step"
    return args


def whole_lines(step: Step, cwd: str | None) -> tuple[str, str] | None:
    """(the whole lines holding ``step.old``, the same lines with ``old`` replaced by ``new``), read from
    the file the agent works on; None when the file cannot be read here or ``old`` is not in it exactly
    once (then the agent's own tool reports the mismatch, as it would for a model's edit)."""
    try:
        text = Path(abs_path(step.path, cwd)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.count(step.old) != 1:
        return None
    at = text.index(step.old)
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at + len(step.old))
    end = len(text) if end == -1 else end
    return text[start:end], text[start:at] + step.new + text[at + len(step.old):end]


# The shell form of an edit (Codex without apply_patch, or the file out of the mock's reach): the same
# exactly-once replacement as Claude Code's Edit, failing loudly otherwise.
SHELL_EDIT = ("python3 -c 'import pathlib,sys; p=pathlib.Path(sys.argv[1]); t=p.read_text(); n=t.count(sys.argv[2]); "
              "sys.exit(\"old text found %d times, expected once\" % n) if n != 1 else "
              "p.write_text(t.replace(sys.argv[2], sys.argv[3], 1))'")


def shell_edit(step: Step) -> str:
    return f"{SHELL_EDIT} {quote(step.path)} {quote(step.old)} {quote(step.new)}"


def json_instance(schema: dict[str, Any]) -> Any:
    """A minimal value that satisfies a JSON schema (Gemini's structured side calls)."""
    kind = schema.get("type")
    kind = kind.lower() if isinstance(kind, str) else kind
    if "enum" in schema:
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: json_instance(props[k]) for k in (schema.get("required") or props)}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return "scripted"


def quote(value: str) -> str:
    return shlex.quote(value)
