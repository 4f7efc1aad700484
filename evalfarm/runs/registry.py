"""The run registry and named baselines: ``<state_dir>/registry.db`` (SQLite, stdlib).

Every run ``evalfarm run`` saves is recorded: id, spec name and hash, dataset hash,
adapters (models) and judge, prompt name/version/hash, times, per-adapter figures
and the artifact path. Runs saved some other way (the Python API's ``save_report``)
are indexed from their JSON the first time the registry is listed. Baselines are
names pointing at a recorded run; every promotion is kept in ``promotions``.

SQLite, not a JSON file: concurrent runs on one machine record without losing
each other's rows (writers wait on the database lock, up to 30 s).
"""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core.verdict import NOTHING, PASSED, run_verdict, stopped
from ..errors import SpecError, UsageError
from ..names import baseline_name_problem, printable
from ..perms import file_mode, make_dir
from ..core.verdict import case_rows, iter_case_rows
from .archive import iter_outcomes, list_runs, load_head, outcomes_of, resolve_run, runs_dir

DB_NAME = "registry.db"
BASELINE_PREFIX = "baseline:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, spec_name TEXT, lineage_tag TEXT, spec_hash TEXT, dataset_hash TEXT,
  adapters TEXT, judge TEXT, prompt_name TEXT, prompt_version TEXT, prompt_hash TEXT, prompt_path TEXT,
  started_at TEXT, finished_at TEXT, recorded_at TEXT, result TEXT, figures TEXT, artifact TEXT, gate TEXT,
  models TEXT, source_run_id TEXT, verdicts INTEGER);
CREATE INDEX IF NOT EXISTS runs_prompt ON runs (prompt_name, prompt_version);
CREATE TABLE IF NOT EXISTS case_verdicts (
  run_id TEXT NOT NULL, adapter TEXT NOT NULL, case_id TEXT NOT NULL, verdict TEXT NOT NULL, trials INTEGER NOT NULL,
  PRIMARY KEY (run_id, adapter, case_id));
CREATE INDEX IF NOT EXISTS case_verdicts_case ON case_verdicts (adapter, case_id);
CREATE TABLE IF NOT EXISTS baselines (name TEXT PRIMARY KEY, run_id TEXT NOT NULL, promoted_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS promotions (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, run_id TEXT NOT NULL,
  previous_run_id TEXT, promoted_at TEXT NOT NULL);
"""
# columns added after the first release: registry.db files made before get them when first opened
_ADDED_COLS = (("models", "TEXT"), ("source_run_id", "TEXT"), ("verdicts", "INTEGER"))
_JSON_COLS = ("adapters", "judge", "figures", "gate", "models")
_FIGURES = ("overall", "pass_rate", "golden_pass_rate", "judge_mean", "items", "measured", "errors")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def result_of(report: dict[str, Any]) -> str:
    """The registry's one-word result column, from the run's verdict (core.verdict)."""
    verdict = run_verdict(report)
    return {PASSED: "PASS", NOTHING: "NOTHING"}.get(verdict, "FAIL" if verdict == "FAILED" else "PARTIAL")


def figures_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a: {k: f.get(k) for k in _FIGURES} for a, f in (report.get("per_adapter") or {}).items()}


def _db_errors(method):
    """A database problem (read-only state dir, a locked or corrupt file) is one line, not a traceback."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path}: run registry: {exc}") from None
    return wrapper


class Registry:
    """Run history and baselines under one state dir."""

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / DB_NAME

    def _connect(self) -> sqlite3.Connection:
        make_dir(self.state_dir)
        new = not self.path.exists()
        try:
            conn = sqlite3.connect(self.path, timeout=30)
            if new:  # SQLite creates it 0666 narrowed by the umask: 0666 under umask 000
                os.chmod(self.path, file_mode())
            conn.row_factory = sqlite3.Row
            conn.executescript(_SCHEMA)
            _migrate(conn)
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path}: cannot open the run registry ({exc})") from None
        return conn

    # --- runs ----------------------------------------------------------------------------------------

    @_db_errors
    def record(self, report: dict[str, Any], artifact: Path, *, dataset_hash: str | None = None,
               prompt: dict[str, Any] | None = None, gate: dict[str, Any] | None = None,
               models: dict[str, str] | None = None, source_run: str | None = None) -> dict[str, Any]:
        """Record (or re-record) one run and, for a complete run, each case's verdict (flake history);
        returns its entry. ``models``: adapter id -> the model it called; ``source_run``: the run whose
        stored outputs this run re-scored."""
        judge = report.get("judge")
        adapters = list(report.get("adapters") or report.get("per_adapter") or [])
        row = {
            "run_id": report["run_id"], "spec_name": report.get("spec_name"),
            "lineage_tag": report.get("lineage_tag"), "spec_hash": report.get("spec_hash"),
            "dataset_hash": dataset_hash, "adapters": adapters,
            "judge": {"model": judge.get("model"), "provider": judge.get("provider")} if judge else None,
            "prompt_name": (prompt or {}).get("name"), "prompt_version": (prompt or {}).get("version"),
            "prompt_hash": (prompt or {}).get("hash"), "prompt_path": (prompt or {}).get("path"),
            "started_at": report.get("started_at"), "finished_at": report.get("finished_at"),
            "recorded_at": utc_now(), "result": result_of(report), "figures": figures_of(report),
            "artifact": self._store_path(Path(artifact)), "gate": gate,
            "models": {a: (models or {}).get(a) or a for a in adapters}, "source_run_id": source_run,
            "verdicts": 0,
        }
        with closing(self._connect()) as conn, conn:
            try:  # a saved report in plan order: its cases streamed, a case at a time (a 1,000,000-item run)
                row["verdicts"] = _put_verdicts(conn, row["run_id"], self._case_rows(report, Path(artifact), True))
            except (ValueError, sqlite3.IntegrityError):  # not in evalfarm's layout, or a case's trials apart
                # (the table keeps a case once: SQLite tells, Python holds nothing): read whole
                row["verdicts"] = _put_verdicts(conn, row["run_id"], self._case_rows(report, Path(artifact)))
            cols = list(row)
            values = [json.dumps(row[c]) if c in _JSON_COLS and row[c] is not None else row[c] for c in cols]
            conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         values)
        return self._entry(row)

    @staticmethod
    def _case_rows(report: dict[str, Any], artifact: Path,
                   streamed: bool = False) -> Iterable[tuple[str, str, str, int]]:
        """A complete run's case verdicts (a partial run's are not a sample of anything); ``streamed``:
        from the saved file a case at a time (ValueError, maybe after some rows, when it is not in
        evalfarm's layout and plan order)."""
        if stopped(report):
            return []
        if "outcomes" in report:
            return case_rows(report["outcomes"])
        if not artifact.is_file():
            return []
        return iter_case_rows(iter_outcomes(artifact)) if streamed else outcomes_of(artifact, case_rows)

    @_db_errors
    def backfill_verdicts(self) -> int:
        """Case verdicts of runs recorded before the registry kept them (read from their reports once);
        returns how many runs were filled in."""
        filled = 0
        for r in self._rows("SELECT run_id, artifact FROM runs WHERE verdicts IS NULL"):
            entry = self._entry(r)
            path = Path(entry["artifact_path"] or "")
            try:  # its head, checked as load_report checks the report, in one streamed pass
                head = load_head(path) if path.is_file() else None
            except UsageError:
                head = None
            with closing(self._connect()) as conn, conn:
                if head is None:
                    n = _put_verdicts(conn, r["run_id"], [])
                else:  # streamed into SQLite a case at a time, as ``record`` does
                    try:
                        n = _put_verdicts(conn, r["run_id"], self._case_rows(head, path, True))
                    except (ValueError, sqlite3.IntegrityError):
                        n = _put_verdicts(conn, r["run_id"], self._case_rows(head, path))
                conn.execute("UPDATE runs SET verdicts = ? WHERE run_id = ?", (n, r["run_id"]))
            filled += 1
        return filled

    def case_verdicts(self, run_ids: list[str], adapter: str) -> dict[str, dict[str, str]]:
        """run id -> case id -> verdict, for one adapter of the given runs."""
        out: dict[str, dict[str, str]] = {r: {} for r in run_ids}
        for i in range(0, len(run_ids), 500):
            chunk = run_ids[i:i + 500]
            sql = (f"SELECT run_id, case_id, verdict FROM case_verdicts WHERE adapter = ? AND run_id IN "
                   f"({', '.join('?' * len(chunk))})")
            for row in self._rows(sql, (adapter, *chunk)):
                out[row["run_id"]][row["case_id"]] = row["verdict"]
        return out

    @_db_errors
    def set_gate(self, run_id: str, gate: dict[str, Any]) -> None:
        with closing(self._connect()) as conn, conn:
            conn.execute("UPDATE runs SET gate = ? WHERE run_id = ?", (json.dumps(gate), run_id))

    def _store_path(self, artifact: Path) -> str:
        """Relative to the state dir when inside it (the state dir may move), else absolute."""
        artifact = artifact.resolve()
        try:
            return str(artifact.relative_to(self.state_dir.resolve()))
        except ValueError:
            return str(artifact)

    def _entry(self, row: dict[str, Any] | sqlite3.Row) -> dict[str, Any]:
        entry = dict(row)
        for col in _JSON_COLS:
            if isinstance(entry.get(col), str):
                entry[col] = json.loads(entry[col])
        entry["artifact_path"] = str(self.state_dir / entry["artifact"]) if entry.get("artifact") else None
        entry["prompt"] = ({"name": entry["prompt_name"], "version": entry["prompt_version"],
                            "hash": entry["prompt_hash"], "path": entry["prompt_path"]}
                           if entry.get("prompt_name") else None)
        return entry

    def sync(self) -> int:
        """Index saved runs the registry has not seen (e.g. saved by the Python API); returns how many."""
        known = {r["run_id"] for r in self._rows("SELECT run_id FROM runs")}
        added = 0
        for path in list_runs(self.state_dir):
            if path.stem in known:
                continue
            try:  # its head only (checked as load_report checks it); ``record`` streams its cases
                report = load_head(path)
            except UsageError:
                continue
            if report.get("run_id") != path.stem:
                continue
            self.record(report, path)
            added += 1
        return added

    @_db_errors
    def _rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with closing(self._connect()) as conn:
            return conn.execute(sql, args).fetchall()

    def runs(self, spec: str | None = None, tag: str | None = None) -> list[dict[str, Any]]:
        """Entries newest first (run ids sort by time), optionally one spec name / lineage tag."""
        self.sync()
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if spec is not None:
            sql += " AND spec_name = ?"
            args.append(spec)
        if tag is not None:
            sql += " AND lineage_tag = ?"
            args.append(tag)
        return [self._entry(r) for r in self._rows(sql + " ORDER BY run_id DESC", tuple(args))]

    def get(self, run_id: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return self._entry(rows[0]) if rows else None

    def prompt_conflict(self, name: str, version: str, digest: str) -> dict[str, Any] | None:
        """The newest recorded run that used prompt ``name@version`` with different content."""
        rows = self._rows("SELECT * FROM runs WHERE prompt_name = ? AND prompt_version = ? AND prompt_hash != ? "
                          "ORDER BY run_id DESC LIMIT 1", (name, version, digest))
        return self._entry(rows[0]) if rows else None

    # --- baselines -----------------------------------------------------------------------------------

    @_db_errors
    def promote(self, name: str, report: dict[str, Any], artifact: Path) -> str | None:
        """Point baseline ``name`` at this run (recording it if needed); returns the previous run id."""
        check_baseline_name(name)
        if self.get(report["run_id"]) is None:
            self.record(report, artifact)
        now = utc_now()
        with closing(self._connect()) as conn, conn:
            prev = conn.execute("SELECT run_id FROM baselines WHERE name = ?", (name,)).fetchone()
            conn.execute("INSERT OR REPLACE INTO baselines (name, run_id, promoted_at) VALUES (?, ?, ?)",
                         (name, report["run_id"], now))
            conn.execute("INSERT INTO promotions (name, run_id, previous_run_id, promoted_at) VALUES (?, ?, ?, ?)",
                         (name, report["run_id"], prev[0] if prev else None, now))
        return prev[0] if prev else None

    def baseline(self, name: str) -> dict[str, Any] | None:
        """The baseline's run entry plus ``baseline_name`` and ``promoted_at``; None if no such name
        (a look-up never creates the registry)."""
        if not self.path.is_file():
            return None
        rows = self._rows("SELECT b.name AS baseline_name, b.promoted_at, r.* FROM baselines b "
                          "LEFT JOIN runs r ON r.run_id = b.run_id WHERE b.name = ?", (name,))
        if not rows:
            return None
        row = dict(rows[0])
        if row["run_id"] is None:
            raise UsageError(f"baseline {name!r} points at a run the registry no longer has")
        return self._entry(row)

    def baselines(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT b.name AS baseline_name, b.promoted_at, r.* FROM baselines b "
                          "LEFT JOIN runs r ON r.run_id = b.run_id ORDER BY b.name")
        return [self._entry(r) for r in rows]

    def baseline_names(self) -> dict[str, list[str]]:
        """run id -> the baseline names pointing at it."""
        out: dict[str, list[str]] = {}
        for r in self._rows("SELECT name, run_id FROM baselines ORDER BY name"):
            out.setdefault(r["run_id"], []).append(r["name"])
        return out

    def history(self, name: str) -> Iterator[dict[str, Any]]:
        for r in self._rows("SELECT * FROM promotions WHERE name = ? ORDER BY seq", (name,)):
            yield dict(r)


def check_baseline_name(name: object, flag: str = "baseline name") -> str:
    """A baseline name (``--name``, ``--baseline``, or a spec name used as one), or exit 2."""
    problem = baseline_name_problem(name)
    if problem:
        raise UsageError(f"{flag} {str(name)[:80]!r} {problem}")
    return name  # type: ignore[return-value]


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a registry.db made by an earlier version up to this schema (new columns are NULL: a
    NULL ``verdicts`` means "not read yet", see ``backfill_verdicts``)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    for col, kind in _ADDED_COLS:
        if col not in have:
            try:
                conn.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
            except sqlite3.OperationalError as exc:  # another process added it a moment ago
                if "duplicate column" not in str(exc):
                    raise
    conn.commit()


def _put_verdicts(conn: sqlite3.Connection, run_id: str, rows: Iterable[tuple[str, str, str, int]]) -> int:
    """Replace a run's case verdicts with ``rows`` (streamed into SQLite); returns how many."""
    conn.execute("DELETE FROM case_verdicts WHERE run_id = ?", (run_id,))
    n = 0

    def counted():
        nonlocal n
        for r in rows:
            n += 1
            yield (run_id, *r)

    conn.executemany("INSERT INTO case_verdicts (run_id, adapter, case_id, verdict, trials) VALUES (?, ?, ?, ?, ?)",
                     counted())
    return n


def resolve_ref(ref: str, state_dir: Path | str) -> Path:
    """A run by path, id, unique id prefix, or ``baseline:NAME``."""
    if ref.startswith(BASELINE_PREFIX):
        name = ref[len(BASELINE_PREFIX):]
        entry = Registry(state_dir).baseline(name)
        if entry is None:
            raise UsageError(f"no baseline named {name!r} in {Path(state_dir) / DB_NAME}; "
                             "promote a run with 'evalfarm baseline RUN --name NAME'")
        return _artifact(entry, f"baseline {name!r}")
    return resolve_run(ref, state_dir)


def _artifact(entry: dict[str, Any], what: str) -> Path:
    path = Path(entry["artifact_path"] or "")
    if not entry.get("artifact") or not path.is_file():
        raise UsageError(f"{what}: run {entry['run_id']} is recorded but its report {path} is missing")
    return path


def baseline_report(name: str, state_dir: Path | str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(entry, report head) of baseline ``name``, or None when there is no such baseline. The head
    (``archive.load_head``: the report without its outcomes and prompts) is read after the checks
    ``load_report`` makes, in one streamed pass: a million-item baseline is never held."""
    entry = Registry(state_dir).baseline(name)
    if entry is None:
        return None
    return entry, load_head(_artifact(entry, f"baseline {name!r}"))


def is_stored(path: Path, state_dir: Path | str) -> bool:
    try:
        path.resolve().relative_to(runs_dir(state_dir).resolve())
        return True
    except ValueError:
        return False


def check_prompt_unchanged(state_dir: Path | str, version: Any) -> None:
    """A prompt version is immutable: when the registry already has a run of the same name and
    version with different content, the run stops before anything is sent (exit 2)."""
    if not (Path(state_dir) / DB_NAME).is_file():
        return
    clash = Registry(state_dir).prompt_conflict(version.name, version.version, version.hash)
    if clash is not None:
        raise SpecError(
            f"prompt {version.name}@{version.version} changed since run {clash['run_id']} used it "
            f"({clash['prompt_hash'][:19]} -> {version.hash[:19]}); a version is immutable: save the change "
            f"as a new version (e.g. {version.path.parent / ('<new>' + version.path.suffix)}) and point "
            "current or --prompt-version at it", path=str(version.path))


def list_lines(state_dir: Path, spec: str | None = None, tag: str | None = None) -> list[str]:
    """``evalfarm ls``: id, finished, spec, result, path, figures, prompt, baselines (tab-separated)."""

    if not runs_dir(state_dir).is_dir() and not (Path(state_dir) / DB_NAME).is_file():
        return []
    registry = Registry(state_dir)
    names = registry.baseline_names()
    out = []
    for e in registry.runs(spec=spec, tag=tag):
        figures = " ".join(f"{a}={f['overall']:.3f}" if f.get("overall") is not None else f"{a}=n/a"
                           for a, f in (e.get("figures") or {}).items())
        prompt = f"{e['prompt_name']}@{e['prompt_version']}" if e.get("prompt_name") else "-"
        out.append(_row([e["run_id"], e.get("finished_at") or "", e.get("spec_name") or "", e["result"],
                         e.get("artifact_path") or "", figures, prompt, ",".join(names.get(e["run_id"], [])) or "-"]))
    if spec is None and tag is None:  # saved files the registry could not read
        known = {e["run_id"] for e in registry.runs()}
        out += [_row([p.stem, "", "", "UNREADABLE", str(p)]) for p in list_runs(state_dir) if p.stem not in known]
    return out


def _row(cells: list[Any]) -> str:
    """One tab-separated row: a tab or newline inside a value (an old registry, a file name) is shown
    escaped, so every run stays one row of the same columns."""
    return "\t".join(printable(c) for c in cells)


def baseline_lines(state_dir: Path) -> list[str]:

    if not (Path(state_dir) / DB_NAME).is_file():
        return []
    return [_row([e["baseline_name"], e["run_id"], e["promoted_at"], e.get("spec_name") or "",
                  e.get("result") or "", e.get("artifact_path") or ""])
            for e in Registry(state_dir).baselines()]
