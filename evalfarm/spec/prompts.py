"""The versioned prompt store: ``prompts/<name>/<version>.txt`` or ``.yaml``, beside the spec.

- ``<version>.txt``: the whole file is the system prompt.
- ``<version>.yaml`` (or ``.yml``): ``system`` (the system prompt), ``user`` (a template for the
  user message; ``{input}`` is replaced by the case's text, nothing else is substituted) and an
  optional ``description``. At least one of system/user.
- ``current``: the pointer, a one-line file naming the version (``v2``) or a symlink to a version
  file. Used when neither ``--prompt-version`` nor a pin (``prompt: NAME@VERSION``) names one.

The spec names its prompt with ``prompt: NAME`` (or ``NAME@VERSION``); ``--prompt-version V``
overrides. Without ``prompt:``, ``--prompt-version`` uses the only prompt in ``prompts/``; a run
without a spec file (``--dataset`` cases, store in the working directory) also uses that only
prompt's ``current`` pointer when it has one. Each version is content-hashed (``sha256:`` of the
file's bytes); the run records name, version and hash in the registry. A version is immutable: when
the registry already has a run of the same name and version with a different hash, the run stops
before anything is sent (``ci.registry.check_prompt_unchanged``, exit 2).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..canonical import canonical_json, sha256_hex
from ..errors import SpecError
from .models import PromptSpec
from .sourcemap import line_for, load_yaml, read_text

STORE_DIR = "prompts"
POINTER = "current"
SUFFIXES = (".txt", ".yaml", ".yml")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_YAML_KEYS = ("system", "user", "description")


@dataclass
class PromptVersion:
    name: str
    version: str
    path: Path
    hash: str
    system: str | None
    user: str | None
    resolved_by: str  # "flag", "pin" or "pointer"

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "hash": self.hash, "path": str(self.path),
                "resolved_by": self.resolved_by}

    def apply(self, prompt: PromptSpec) -> PromptSpec:
        """The prompt as this version sends it: its system prompt, and the user template around the text."""
        update: dict[str, Any] = {} if self.system is None else {"system": self.system}
        if self.user is not None:
            update["text"] = self.user.replace("{input}", prompt.text)
        return prompt.model_copy(update=update) if update else prompt


def _check_name(value: str, what: str, where: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise SpecError(f"{what} {value!r} is not a valid name (letters, digits, '.', '_', '-')", path=where)
    return value


def list_versions(base_dir: Path, name: str) -> dict[str, Path]:
    folder = Path(base_dir) / STORE_DIR / name
    out: dict[str, Path] = {}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.suffix in SUFFIXES and path.is_file() and not path.name.startswith("."):
                out.setdefault(path.stem, path)
    return out


def _pointer(folder: Path) -> str | None:
    ptr = folder / POINTER
    if ptr.is_symlink():
        return Path(ptr.resolve().name).stem
    if ptr.is_file():
        value = read_text(ptr).strip()
        if not value or "\n" in value:
            raise SpecError("the pointer must be one line naming a version, e.g. v2", path=str(ptr), line=1)
        return Path(value).stem if Path(value).suffix in SUFFIXES else value
    return None


def resolve(base_dir: Path, name: str, version: str | None = None, *, pinned: str | None = None) -> PromptVersion:
    """Find and load one version: ``version`` (the flag), else ``pinned``, else the pointer."""
    folder = Path(base_dir) / STORE_DIR / name
    if not folder.is_dir():
        raise SpecError(f"prompt store not found: {folder} (prompts live in prompts/<name>/<version>.txt "
                        "beside the spec)", path=str(folder), field="prompt")
    resolved_by = "flag" if version else "pin" if pinned else "pointer"
    version = version or pinned or _pointer(folder)
    if version is None:
        raise SpecError(f"no version given and no pointer {folder / POINTER}; pass --prompt-version or write "
                        "the version name into that file", path=str(folder))
    _check_name(version, "prompt version", str(folder))
    candidates = [folder / f"{version}{s}" for s in SUFFIXES if (folder / f"{version}{s}").is_file()]
    if not candidates:
        known = ", ".join(list_versions(base_dir, name)) or "none"
        raise SpecError(f"prompt {name!r} has no version {version!r} (versions: {known})", path=str(folder))
    if len(candidates) > 1:
        raise SpecError(f"prompt {name!r} version {version!r} is ambiguous: "
                        f"{', '.join(p.name for p in candidates)}", path=str(folder))
    path = candidates[0]
    raw = path.read_bytes()
    system, user = _parse(path)
    return PromptVersion(name=name, version=version, path=path, hash="sha256:" + sha256_hex(raw),
                         system=system, user=user, resolved_by=resolved_by)


def _parse(path: Path) -> tuple[str | None, str | None]:
    text = read_text(path)
    if path.suffix == ".txt":
        return text, None
    data, lines = load_yaml(text, path)
    if not isinstance(data, dict):
        raise SpecError("a YAML prompt is a mapping with 'system' and/or 'user'", path=str(path), line=1)
    for key, value in data.items():
        if key not in _YAML_KEYS:
            raise SpecError(f"unknown field; allowed fields are {', '.join(_YAML_KEYS)}", path=str(path),
                            line=line_for(lines, (key,)), field=str(key))
        if not isinstance(value, str):
            raise SpecError(f"must be a string (got {type(value).__name__})", path=str(path),
                            line=line_for(lines, (key,)), field=str(key))
    system, user = data.get("system"), data.get("user")
    if system is None and user is None:
        raise SpecError("a YAML prompt needs 'system' and/or 'user'", path=str(path), line=1)
    if user is not None and "{input}" not in user:
        raise SpecError("the user template must contain {input} (where the case's text goes)", path=str(path),
                        line=line_for(lines, ("user",)), field="user")
    return system, user


def dataset_hash(prompts: Iterable[PromptSpec]) -> str:
    """What the cases are, without the prompt version applied to them (streamed: a 100,000-case
    dataset is hashed without holding it)."""
    import hashlib

    h = hashlib.sha256()
    for p in prompts:
        h.update(canonical_json(p.model_dump(mode="json", exclude={"system"})).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def _sole_pointed(base_dir: Path) -> bool:
    """True when ``prompts/`` holds exactly one prompt and it has a ``current`` pointer: a run
    without a spec file (``--dataset`` cases) then uses it, as the seed's ``run`` does."""
    store = Path(base_dir) / STORE_DIR
    names = [p for p in store.iterdir() if p.is_dir()] if store.is_dir() else []
    return len(names) == 1 and (names[0] / POINTER).exists()


def _prompt_name(ref: str | None, base_dir: Path, where: str) -> tuple[str, str | None]:
    """(name, pinned version) from the spec's ``prompt`` field or, failing that, the only prompt."""
    if ref:
        name, _, pinned = ref.partition("@")
        return _check_name(name, "prompt", where), (_check_name(pinned, "prompt version", where) if pinned else None)
    store = Path(base_dir) / STORE_DIR
    names = sorted(p.name for p in store.iterdir() if p.is_dir()) if store.is_dir() else []
    if len(names) == 1:
        return names[0], None
    raise SpecError("--prompt-version needs to know which prompt: add 'prompt: NAME' to the spec"
                    + (f" (prompts in {store}: {', '.join(names)})" if names else f" (no prompt store at {store})"),
                    path=where, field="prompt")


def version_for(ref: str | None, flag: str | None, base_dir: Path, *, spec_path: Path | None) -> PromptVersion | None:
    """The prompt version a run uses: the spec's ``prompt: NAME[@VERSION]`` (or the only prompt in
    the store), at ``--prompt-version`` (``flag``), the pin, or the ``current`` pointer. None when the
    run uses no prompt store: a spec file without ``prompt:`` and no flag; a run without a spec file
    uses the store only when it holds exactly one pointed prompt."""
    if ref is None and not flag and not (spec_path is None and _sole_pointed(base_dir)):
        return None
    name, pinned = _prompt_name(ref, base_dir, str(spec_path or Path(base_dir) / STORE_DIR))
    return resolve(base_dir, name, flag, pinned=pinned)
