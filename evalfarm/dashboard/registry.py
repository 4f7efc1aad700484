"""The run registry as the pages read it: baselines, each run's prompt and its gate result, from
``registry.db`` opened read-only (SQLite ``mode=ro``: serving never writes the state dir), cached
until the file changes."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from . import safe, views
from .reports import stat_key
from .safe import BadRef
from ..runs.registry import BASELINE_PREFIX


class RegistryView:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._cached: tuple[tuple | None, dict[str, Any]] = (None, {})

    def read(self) -> dict[str, Any]:
        """{"baselines", "by_run" (run -> baseline names), "prompts" (run -> name@version), "gates"
        (run -> the gate's result), "error", "present"}."""
        empty = {"baselines": {}, "by_run": {}, "prompts": {}, "gates": {}, "error": None, "present": False}
        try:
            key: tuple | None = stat_key(self.path)
        except OSError:
            return empty
        cached_key, cached = self._cached
        if key == cached_key:
            return cached
        out: dict[str, Any] = {**empty, "present": True}
        try:
            conn = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=2)
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if "baselines" in tables:
                    for name, rid, promoted in conn.execute("SELECT name, run_id, promoted_at FROM baselines "
                                                            "ORDER BY name"):
                        name, rid = safe.text(name, 200), safe.text(rid, 200)
                        out["baselines"][name] = {"run_id": rid, "promoted_at": safe.text(promoted, 64)}
                        out["by_run"].setdefault(rid, []).append(name)
                if "runs" in tables:
                    for rid, pname, pver, gate in conn.execute("SELECT run_id, prompt_name, prompt_version, gate "
                                                               "FROM runs WHERE prompt_name IS NOT NULL OR gate IS "
                                                               "NOT NULL"):
                        rid = safe.text(rid, 200)
                        if pname is not None:
                            out["prompts"][rid] = f"{safe.text(pname, 100)}@{safe.text(pver, 100)}"
                        if gate is not None and len(gate) < 1 << 20:
                            try:
                                out["gates"][rid] = views.gate(json.loads(gate))
                            except (ValueError, RecursionError):
                                pass
            finally:
                conn.close()
        except sqlite3.Error as exc:
            out["error"] = f"{self.path.name}: {exc}"
        self._cached = (key, out)
        return out

    def baselines(self) -> dict[str, dict[str, Any]]:
        return self.read()["baselines"]

    def resolve(self, ref: str) -> str:
        """A run id, or ``baseline:NAME`` -> the run id it points at."""
        if isinstance(ref, str) and ref.startswith(BASELINE_PREFIX):
            name = safe.name(ref[len(BASELINE_PREFIX):], "baseline name")
            entry = self.baselines().get(name)
            if entry is None:
                raise BadRef(f"no baseline named {name!r} in {self.path.name}", 404)
            return safe.run_id(entry["run_id"])
        return safe.run_id(ref)
