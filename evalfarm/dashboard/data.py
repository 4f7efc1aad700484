"""The pages' one door into evalfarm: every evalfarm module the server's pages use is imported here
(the worker-side metrics.py and heartbeat.py import their own).

Everything here is read-only: the registry is opened with SQLite's ``mode=ro``, the audit chain
and ledgers are only read, and Redis is only read (GET, HGETALL, LLEN, SCAN, PTTL).

Reports are untrusted input: each is normalised field by field (``safe``), a file that cannot
be read becomes a row saying why, and names from URLs are validated before they touch a path.
Parsed reports are cached by (size, mtime, inode), so a page view of a 10,000-case run parses
its JSON once, and the runs list reads only each report's head (``safe.read_summary_fast``).
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable

from . import safe
from .safe import BadRef

# --- evalfarm internals (the only imports of evalfarm modules in evalfarm/dashboard/) -------------
from ..ci.diff import compare_cases, diff_reports  # noqa: E402
from ..runs.registry import BASELINE_PREFIX, DB_NAME, result_of  # noqa: E402
from ..core.report.model import SCHEMA as REPORT_SCHEMA  # noqa: E402
from ..core.taxonomy import MODES as FAILURE_MODES  # noqa: E402
from ..core.verdict import item_passed, stopped  # noqa: E402
from ..errors import EvalfarmError, UsageError  # noqa: E402,F401  (re-exported for cli.py)
from ..redact import redact  # noqa: E402


def _ab():
    """The A/B modules, imported when an A/B page is first viewed."""
    from ..ab import artifact, audit, harness

    return artifact, audit, harness


def _farm():
    from ..executors.celery.app import QUEUES
    from ..executors.celery.broker_scan import PRIORITY_SEP
    from ..executors.celery.store import RUNS_INDEX, RedisStore
    from ..executors.store import COST_SCALE

    return QUEUES, PRIORITY_SEP, COST_SCALE, RUNS_INDEX, RedisStore


# the layout of a state dir (ci/artifacts.py, ci/registry.py, ab/paths.py)
RUNS = "runs"
AB_REPORTS = ("reports", "eval_ab")
AUDIT = "audit"
SYNTHETIC_LEDGER = ("ab", "ledger.jsonl")
PRODUCTION_LEDGER = ("cost", "ledger.jsonl")
MAX_REPORT_BYTES = 512 << 20
MAX_ARTIFACT_BYTES = 64 << 20
OUTPUT_LIMIT = 200_000  # characters of one output shown on a page
PAGE_MAX = 500
HIST_BINS = 20
VERDICTS = ("PASS", "FAIL", "NOTHING", "PARTIAL", "UNKNOWN")  # PARTIAL: interrupted, or stopped by budget
PASS_RATE_FIELDS = ("overall", "pass_rate", "golden_pass_rate", "judge_mean")
THRESHOLD_OF = {"golden_pass_rate": "golden_pass_rate_min", "judge_mean": "judge_score_min",
                "overall": "overall_score_min", "pass_rate": "pass_rate_min"}
_FIG_NUM = ("golden_pass_rate", "judge_mean", "pass_rate", "overall", "latency_ms_p50", "latency_ms_p95",
            "cost_usd", "judge_cost_usd")
_FIG_INT = ("prompts", "items", "measured", "errors", "golden_passed", "passed", "tokens_in", "tokens_out",
            "cached", "judge_tokens_in", "judge_tokens_out")


class ReportError(Exception):
    """A stored report that cannot be shown (unreadable, not JSON, not a report, too big)."""


def _stat_key(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


class _LRU:
    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, key):
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        return None

    def put(self, key, value) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


# --- normalising reports ------------------------------------------------------------------------------

def _figures(raw: Any) -> dict[str, Any]:
    f = safe.mapping(raw)
    out: dict[str, Any] = {k: safe.num(f.get(k)) for k in _FIG_NUM}
    out.update({k: safe.count(f.get(k)) for k in _FIG_INT})
    out["failure_modes"] = safe.int_map(f.get("failure_modes"))
    out["error_classes"] = safe.int_map(f.get("error_classes"))
    pk = f.get("pass_k")
    if isinstance(pk, dict):
        out["pass_k"] = {"k": safe.count(pk.get("k")), "rate": safe.num(pk.get("rate")),
                         "flaky": safe.str_list(pk.get("flaky"))}
    return out


def _verdict(raw: dict[str, Any]) -> str:
    """The registry's one-word result (core.verdict decides it); UNKNOWN for a report that does not say."""
    if not stopped(raw) and raw.get("nothing_measured") is not True and not isinstance(raw.get("thresholds_passed"),
                                                                                       bool):
        return "UNKNOWN"
    return result_of(raw)


def _summary(raw: Any, run_id: str) -> dict[str, Any]:
    """Every summary field a page shows, each of the right type."""
    if not isinstance(raw, dict):
        raise ReportError("not a JSON object")
    problems = []
    if raw.get("schema") != REPORT_SCHEMA:
        problems.append(f"schema is {safe.text(raw.get('schema'), 60)!r}, expected {REPORT_SCHEMA!r}")
    if raw.get("run_id") != run_id:
        problems.append(f"run_id inside is {safe.text(raw.get('run_id'), 80)!r}")
    per = {safe.text(a, 200): _figures(f) for a, f in safe.mapping(raw.get("per_adapter")).items()}
    thresholds = {safe.text(k, 80): safe.num(v) for k, v in safe.mapping(raw.get("thresholds")).items()}
    cost_raw = safe.mapping(raw.get("cost"))
    model_usd = safe.num(cost_raw.get("model_usd"))
    judge_usd = safe.num(cost_raw.get("judge_usd"))
    if model_usd is None:
        model_usd = math.fsum(f["cost_usd"] or 0.0 for f in per.values())
    if judge_usd is None:
        judge_usd = math.fsum(f["judge_cost_usd"] or 0.0 for f in per.values())
    items = sum(f["items"] for f in per.values())
    measured = sum(f["measured"] for f in per.values())
    passed = sum(f["passed"] for f in per.values())
    errors = sum(f["errors"] for f in per.values())
    judge = raw.get("judge")
    adapters = safe.str_list(raw.get("adapters")) or list(per)
    return {
        "run_id": run_id, "spec_name": safe.text(raw.get("spec_name"), 300),
        "lineage_tag": safe.text(raw.get("lineage_tag"), 300), "spec_hash": safe.text(raw.get("spec_hash"), 80),
        "mode": safe.text(raw.get("mode"), 40), "trials": safe.count(raw.get("trials")),
        "adapters": adapters, "per_adapter": per, "thresholds": thresholds,
        "threshold_failures": safe.str_list(raw.get("threshold_failures")),
        "thresholds_passed": safe.flag(raw.get("thresholds_passed")),
        "nothing_measured": safe.flag(raw.get("nothing_measured")), "verdict": _verdict(raw),
        "judge": ({"model": safe.text(judge.get("model"), 200), "provider": safe.text(judge.get("provider"), 200)}
                  if isinstance(judge, dict) else None),
        "cost": {"model_usd": model_usd, "judge_usd": judge_usd, "total_usd": model_usd + judge_usd,
                 "model_tokens": safe.count(cost_raw.get("model_tokens")),
                 "judge_tokens": safe.count(cost_raw.get("judge_tokens"))},
        "started_at": safe.text(raw.get("started_at"), 64), "finished_at": safe.text(raw.get("finished_at"), 64),
        "duration_s": safe.num(raw.get("duration_s")),
        "items": items, "measured": measured, "passed": passed, "errors": errors,
        "pass_rate": passed / measured if measured else None, "problems": problems,
    }


def _checks(raw: Any) -> list[dict[str, Any]]:
    return [{"kind": safe.text(c.get("kind"), 80), "passed": safe.flag(c.get("passed")),
             "reason": safe.text(c.get("reason"), 5000), "format": safe.flag(c.get("format"))}
            for c in safe.seq(raw) if isinstance(c, dict)]


def _criteria(raw: Any) -> list[dict[str, Any]]:
    return [{"id": safe.text(c.get("id"), 200), "weight": safe.num(c.get("weight")), "score": safe.num(c.get("score")),
             "verdict": safe.text(c.get("verdict"), 40), "reason": safe.text(c.get("reason"), 5000)}
            for c in safe.seq(raw) if isinstance(c, dict)]


def _prompts_by_id(value: Any) -> dict[str, Any]:
    """The report's ``prompts`` section (a list of prompts as sent, each with its ``id``) by id; an
    older report's map is taken as it is."""
    if isinstance(value, list):
        return {safe.text(p.get("id")): p for p in value if isinstance(p, dict) and isinstance(p.get("id"), str)}
    return safe.mapping(value)


def _input_of(o: dict[str, Any], prompts: dict[str, Any]) -> str | None:
    """The case's input: from the report's ``prompts`` section (what was sent), or ``input``/``prompt``
    on the outcome."""
    for key in ("input", "prompt"):
        v = o.get(key)
        if isinstance(v, dict):
            v = v.get("text")
        if v is not None:
            return safe.text(v, OUTPUT_LIMIT)
    p = prompts.get(safe.text(o.get("prompt_id")))
    if isinstance(p, dict):
        p = p.get("text")
    return None if p is None else safe.text(p, OUTPUT_LIMIT)


def _outcome(i: int, o: dict[str, Any], prompts: dict[str, Any]) -> dict[str, Any]:
    err = o.get("error")
    error = None
    if err:
        e = safe.mapping(err) or {"message": err}
        error = {"class": safe.text(e.get("class") or "Error", 120), "stage": safe.text(e.get("stage"), 40),
                 "message": safe.text(e.get("message"), 5000), "status": safe.opt_text(e.get("status"), 20)}
    out = {
        "index": i, "key": safe.text(o.get("key"), 200), "adapter": safe.text(o.get("adapter"), 200),
        "prompt_id": safe.text(o.get("prompt_id"), 500), "trial": safe.count(o.get("trial")),
        "output": safe.opt_text(o.get("output"), OUTPUT_LIMIT), "output_truncated":
            isinstance(o.get("output"), str) and len(o["output"]) > OUTPUT_LIMIT,
        "passed": safe.flag(o.get("passed")), "golden_passed": safe.flag(o.get("golden_passed")),
        "golden_reason": safe.opt_text(o.get("golden_reason"), 5000),
        "failure_mode": safe.opt_text(o.get("failure_mode"), 60) or None,
        "latency_ms": safe.num(o.get("latency_ms")), "finish_reason": safe.opt_text(o.get("finish_reason"), 40),
        "checks": _checks(o.get("checks")), "judge_score": safe.num(o.get("judge_score")),
        "judge_criteria": _criteria(o.get("judge_criteria")), "judge_reason": safe.opt_text(o.get("judge_reason"), 5000),
        "input_tokens": safe.count(o.get("input_tokens")), "output_tokens": safe.count(o.get("output_tokens")),
        "cost_usd": safe.num(o.get("cost_usd")) or 0.0, "judge_input_tokens": safe.count(o.get("judge_input_tokens")),
        "judge_output_tokens": safe.count(o.get("judge_output_tokens")),
        "judge_cost_usd": safe.num(o.get("judge_cost_usd")) or 0.0, "attempts": safe.num(o.get("attempts")),
        "cached": o.get("cached") is True, "error": error, "input": _input_of(o, prompts),
    }
    if error is not None:
        out["passed"] = None
    verdict = item_passed(out)
    out["status"] = "errored" if error else ("passed" if verdict else "failed" if verdict is False else "unknown")
    return out


def _histogram(values: list[float], bins: int = HIST_BINS) -> dict[str, Any]:
    if not values:
        return {"edges": [], "counts": [], "n": 0}
    lo, hi = min(values), max(values)
    if hi <= lo:
        return {"edges": [lo, lo + 1.0], "counts": [len(values)], "n": len(values)}
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"edges": [lo + i * width for i in range(bins + 1)], "counts": counts, "n": len(values)}


class Run:
    """A fully loaded, normalised run: summary, outcomes and the figures its charts need."""

    def __init__(self, summary: dict[str, Any], outcomes: list[dict[str, Any]]) -> None:
        self.summary = summary
        self.outcomes = outcomes
        modes: dict[str, int] = {}
        for o in outcomes:
            if o["failure_mode"]:
                modes[o["failure_mode"]] = modes.get(o["failure_mode"], 0) + 1
        order = [m for m in FAILURE_MODES if m in modes] + sorted(m for m in modes if m not in FAILURE_MODES)
        self.failure_modes = [(m, modes[m]) for m in order]
        self.latency = _histogram([o["latency_ms"] for o in outcomes if o["latency_ms"] is not None])
        self.statuses: dict[str, int] = {}
        for o in outcomes:
            self.statuses[o["status"]] = self.statuses.get(o["status"], 0) + 1

    def as_report(self) -> dict[str, Any]:
        """The shape evalfarm.ci.diff expects, built from normalised values only."""
        return {"run_id": self.summary["run_id"],
                "per_adapter": {a: dict(f) for a, f in self.summary["per_adapter"].items()},
                "outcomes": self.outcomes}


# --- the state dir ------------------------------------------------------------------------------------

class State:
    """Read-only view of one state dir (and, with a broker URL, the farm's run store)."""

    def __init__(self, root: Path | str, broker: str | None = None) -> None:
        self.root = Path(root)
        self.broker = broker
        self._summaries: dict[str, tuple[tuple, dict[str, Any]]] = {}
        self._runs = _LRU(4)
        self._load_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._registry: tuple[tuple | None, dict[str, Any]] = (None, {})
        self._ab: dict[str, tuple[tuple, dict[str, Any]]] = {}
        self._redis = None
        self._farm_static: dict[str, dict[str, Any]] = {}
        self._rates: dict[str, list[tuple[float, int]]] = {}

    # -- paths ------------------------------------------------------------------------------------
    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS

    def run_path(self, rid: str) -> Path:
        return self.runs_dir / f"{safe.run_id(rid)}.json"

    @property
    def ab_dir(self) -> Path:
        return self.root.joinpath(*AB_REPORTS)

    # -- registry (read-only) ---------------------------------------------------------------------
    def registry(self) -> dict[str, Any]:
        """Baselines and per-run prompt/gate from registry.db, opened read-only; cached by mtime."""
        path = self.root / DB_NAME
        try:
            key: tuple | None = _stat_key(path)
        except OSError:
            return {"baselines": {}, "by_run": {}, "prompts": {}, "error": None, "present": False}
        cached_key, cached = self._registry
        if key == cached_key:
            return cached
        out: dict[str, Any] = {"baselines": {}, "by_run": {}, "prompts": {}, "error": None, "present": True}
        try:
            conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=2)
            try:
                for name, rid, promoted in conn.execute("SELECT name, run_id, promoted_at FROM baselines ORDER BY name"):
                    name, rid = safe.text(name, 200), safe.text(rid, 200)
                    out["baselines"][name] = {"run_id": rid, "promoted_at": safe.text(promoted, 64)}
                    out["by_run"].setdefault(rid, []).append(name)
                for rid, pname, pver in conn.execute("SELECT run_id, prompt_name, prompt_version FROM runs "
                                                     "WHERE prompt_name IS NOT NULL"):
                    out["prompts"][safe.text(rid, 200)] = f"{safe.text(pname, 100)}@{safe.text(pver, 100)}"
            finally:
                conn.close()
        except sqlite3.Error as exc:
            out["error"] = f"{DB_NAME}: {exc}"
        self._registry = (key, out)
        return out

    def baselines(self) -> dict[str, dict[str, Any]]:
        return self.registry()["baselines"]

    def resolve(self, ref: str) -> str:
        """A run id, or ``baseline:NAME`` -> the run id it points at."""
        if isinstance(ref, str) and ref.startswith(BASELINE_PREFIX):
            name = safe.name(ref[len(BASELINE_PREFIX):], "baseline name")
            entry = self.baselines().get(name)
            if entry is None:
                raise BadRef(f"no baseline named {name!r} in {DB_NAME}", 404)
            return safe.run_id(entry["run_id"])
        return safe.run_id(ref)

    # -- runs -------------------------------------------------------------------------------------
    def _run_files(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.runs_dir))
        except OSError:
            return []
        out = []
        for e in entries:
            n = e.name
            if n.endswith(".json") and not n.endswith(".lineage.json") and not n.startswith("."):
                if safe.is_run_id(n[:-5]):
                    out.append(Path(e.path))
        out.sort(key=lambda p: p.name, reverse=True)  # run ids sort by time
        return out

    def summary(self, path: Path) -> dict[str, Any]:
        """One run's summary (fast head+tail read, cached by stat); a bad file gives an error row."""
        rid = path.name[:-5]
        try:
            key = _stat_key(path)
        except OSError as exc:
            return self._bad_row(rid, f"cannot stat: {exc.strerror or exc}")
        hit = self._summaries.get(rid)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            raw = safe.read_summary_fast(path, key[0])
            if raw is None:
                raw = self._parse(path, key[0])
            row = _summary(raw, rid)
        except (OSError, ReportError, ValueError, RecursionError) as exc:
            row = self._bad_row(rid, str(exc) if isinstance(exc, ReportError) else f"unreadable: {exc}")
        self._summaries[rid] = (key, row)
        return row

    @staticmethod
    def _bad_row(rid: str, why: str) -> dict[str, Any]:
        row = _summary({}, rid)
        row.update(verdict="UNREADABLE", problems=[safe.text(why, 300)])
        return row

    @staticmethod
    def _parse(path: Path, size: int) -> Any:
        if size > MAX_REPORT_BYTES:
            raise ReportError(f"the report is {size >> 20} MiB; the dashboard shows reports up to "
                              f"{MAX_REPORT_BYTES >> 20} MiB")
        try:
            with open(path, "rb") as fh:
                return json.loads(fh.read())
        except UnicodeDecodeError as exc:
            raise ReportError(f"not UTF-8 JSON ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise ReportError(f"not JSON (line {exc.lineno}: {exc.msg})") from None

    def list_runs(self, spec: str | None = None, tag: str | None = None, adapter: str | None = None,
                  verdict: str | None = None, page: int = 1, per_page: int = 100) -> dict[str, Any]:
        """Runs newest first, filtered; each with verdict, pass rate, cost, duration, baselines."""
        reg = self.registry()
        rows = [self.summary(p) for p in self._run_files()]
        specs = sorted({r["spec_name"] for r in rows if r["spec_name"]})
        tags = sorted({r["lineage_tag"] for r in rows if r["lineage_tag"]})
        adapters = sorted({a for r in rows for a in r["adapters"]})
        if spec:
            rows = [r for r in rows if r["spec_name"] == spec]
        if tag:
            rows = [r for r in rows if r["lineage_tag"] == tag]
        if adapter:
            rows = [r for r in rows if adapter in r["adapters"]]
        if verdict:
            rows = [r for r in rows if r["verdict"] == verdict]
        per_page = max(1, min(PAGE_MAX, per_page))
        total = len(rows)
        pages = max(1, -(-total // per_page))
        page = max(1, min(page, pages))
        shown = []
        for r in rows[(page - 1) * per_page: page * per_page]:
            shown.append({k: v for k, v in r.items() if k != "per_adapter"} |
                         {"baselines": reg["by_run"].get(r["run_id"], []),
                          "prompt": reg["prompts"].get(r["run_id"]),
                          "overall": {a: f["overall"] for a, f in r["per_adapter"].items()}})
        return {"runs": shown, "total": total, "page": page, "pages": pages, "per_page": per_page,
                "filters": {"spec": specs, "tag": tags, "adapter": adapters,
                            "verdict": list(VERDICTS) + ["UNREADABLE"]},
                "baselines": reg["baselines"], "registry_error": reg["error"]}

    def load(self, rid: str) -> Run:
        """A run, fully parsed and normalised; cached (a few runs) by file identity."""
        path = self.run_path(rid)
        try:
            key = _stat_key(path)
        except FileNotFoundError:
            raise BadRef(f"no run {rid} under {self.runs_dir}", 404) from None
        except OSError as exc:
            raise ReportError(f"cannot read {path.name}: {exc.strerror or exc}") from None
        with self._lock:
            lock = self._load_locks.setdefault(rid, threading.Lock())
        with lock:  # two requests for one big run parse it once
            hit = self._runs.get((rid, key))
            if hit is not None:
                return hit
            raw = self._parse(path, key[0])
            summary = _summary(raw, rid)
            prompts = _prompts_by_id(raw.get("prompts"))
            outcomes = [_outcome(i, o, prompts) for i, o in
                        enumerate(o for o in safe.seq(raw.get("outcomes")) if isinstance(o, dict))]
            skipped = len(safe.seq(raw.get("outcomes"))) - len(outcomes)
            if skipped:
                summary["problems"].append(f"{skipped} outcome(s) are not JSON objects and are not shown")
            run = Run(summary, outcomes)
            self._runs.put((rid, key), run)
            return run

    def get_run(self, rid: str) -> dict[str, Any]:
        """Summary plus chart figures (no outcomes)."""
        run = self.load(rid)
        reg = self.registry()
        return {**run.summary, "baselines": reg["by_run"].get(rid, []), "prompt": reg["prompts"].get(rid),
                "failure_taxonomy": [{"mode": m, "count": n} for m, n in run.failure_modes],
                "latency_histogram": run.latency, "statuses": run.statuses,
                "case_filters": ["all", "failed", "passed", "errored"] + [m for m, _ in run.failure_modes]}

    def run_cases(self, rid: str, filter: str = "all", adapter: str | None = None, page: int = 1,
                  per_page: int = 50) -> dict[str, Any]:
        """One page of a run's cases, filtered by failure mode ("all", "failed", "passed",
        "errored" or a mode name) and adapter."""
        run = self.load(rid)
        rows: Iterable[dict[str, Any]] = run.outcomes
        if adapter:
            rows = [o for o in rows if o["adapter"] == adapter]
        if filter and filter != "all":
            if filter in ("failed", "passed", "errored"):
                rows = [o for o in rows if o["status"] == filter]
            else:
                rows = [o for o in rows if o["failure_mode"] == filter]
        rows = list(rows)
        per_page = max(1, min(PAGE_MAX, per_page))
        total = len(rows)
        pages = max(1, -(-total // per_page))
        page = max(1, min(page, pages))
        cases = [_case_row(o) for o in rows[(page - 1) * per_page: page * per_page]]
        return {"run_id": rid, "filter": filter or "all", "adapter": adapter, "total": total, "page": page,
                "pages": pages, "per_page": per_page, "cases": cases}

    def case(self, rid: str, index: int) -> dict[str, Any]:
        run = self.load(rid)
        if not 0 <= index < len(run.outcomes):
            raise BadRef(f"run {rid} has no case {index}", 404)
        o = dict(run.outcomes[index])
        if o["input"] is None and self.broker and o["key"]:
            o["input"], o["input_source"] = self._input_from_store(rid, o["key"]), "farm run store"
        else:
            o["input_source"] = "report" if o["input"] is not None else None
        o["run"] = {"run_id": rid, "spec_name": run.summary["spec_name"]}
        return o

    # -- diff -------------------------------------------------------------------------------------
    def diff(self, a_ref: str, b_ref: str, alpha: float = 0.05, limit: int = 200) -> dict[str, Any]:
        """Per-adapter deltas and the case classes (regressed first) with McNemar's p; each listed
        case carries both runs' outputs, trial by trial."""
        a_id, b_id = self.resolve(a_ref), self.resolve(b_ref)
        ra, rb = self.load(a_id), self.load(b_id)
        a, b = ra.as_report(), rb.as_report()
        adapters = diff_reports(a, b)
        cases = compare_cases(a, b, alpha=alpha)
        by_a = _by_case(ra.outcomes)
        by_b = _by_case(rb.outcomes)
        classes = []
        for cls in ("regressed", "fixed", "still_broken", "stable", "unmeasured"):
            rows = cases.get(cls) or []
            shown = []
            for r in rows[:limit]:
                adapter_b = r.get("adapter_b", r["adapter"])
                shown.append({"adapter": r["adapter"], "adapter_b": adapter_b, "case": r["case"],
                              "a": [_side(o) for o in by_a.get((r["adapter"], r["case"]), [])],
                              "b": [_side(o) for o in by_b.get((adapter_b, r["case"]), [])]})
            classes.append({"class": cls, "count": len(rows), "cases": shown, "truncated": len(rows) > limit})
        return {"a": {"ref": a_ref, "run_id": a_id, "spec_name": ra.summary["spec_name"]},
                "b": {"ref": b_ref, "run_id": b_id, "spec_name": rb.summary["spec_name"]},
                "per_adapter": adapters["per_adapter"], "overall_delta": adapters["overall_delta"],
                "winner": adapters["winner"], "counts": cases["counts"], "mcnemar": cases["mcnemar"],
                "per_adapter_cases": cases["per_adapter"], "pairing": cases["pairing"],
                "only_in_a": len(cases["only_in_a"]), "only_in_b": len(cases["only_in_b"]),
                "note": cases["note"], "classes": classes}

    # -- A/B --------------------------------------------------------------------------------------
    def ab_artifacts(self) -> list[dict[str, Any]]:
        try:
            names = sorted(n for n in os.listdir(self.ab_dir) if n.endswith(".json"))
        except OSError:
            return []
        rows = []
        for n in names:
            try:
                sha = safe.sha256_name(n[:-5])
            except BadRef:
                continue
            rows.append(self._ab_summary(sha))
        rows.sort(key=lambda r: r.get("mtime") or 0, reverse=True)
        return rows

    def _ab_load(self, sha: str) -> tuple[dict[str, Any], float]:
        path = self.ab_dir / f"{safe.sha256_name(sha)}.json"
        try:
            st = path.stat()
        except FileNotFoundError:
            raise BadRef(f"no A/B artifact {sha}", 404) from None
        if st.st_size > MAX_ARTIFACT_BYTES:
            raise ReportError(f"the artifact is {st.st_size >> 20} MiB; too big to show")
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        hit = self._ab.get(sha)
        if hit is not None and hit[0] == key:
            return hit[1], st.st_mtime
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ReportError(f"unreadable artifact: {exc}") from None
        if not isinstance(data, dict):
            raise ReportError("the artifact is not a JSON object")
        self._ab[sha] = (key, data)
        return data, st.st_mtime

    def _ab_summary(self, sha: str) -> dict[str, Any]:
        try:
            data, mtime = self._ab_load(sha)
        except (BadRef, ReportError) as exc:
            return {"sha256": sha, "error": str(exc), "mtime": None}
        view = _ab_view(data)
        return {"sha256": sha, "mtime": mtime, "suite": view["suite"], "executor": view["executor"],
                "arms": [a["name"] for a in view["arms"]], "verdict": view["verdict"], "trials": view["trials"],
                "error": None if not view["problems"] else "; ".join(view["problems"])}

    def ab_artifact(self, sha: str) -> dict[str, Any]:
        data, mtime = self._ab_load(sha)
        return {"sha256": sha, "mtime": mtime, **_ab_view(data)}

    def ab_verify(self, sha: str) -> dict[str, Any]:
        """``evalfarm ab verify`` on the artifact, with the state dir's ledger and audit chain."""
        path = self.ab_dir / f"{safe.sha256_name(sha)}.json"
        if not path.is_file():
            raise BadRef(f"no A/B artifact {sha}", 404)
        artifact_mod, audit_mod, harness = _ab()
        data, _ = self._ab_load(sha)
        kind = safe.mapping(data.get("executor")).get("kind")
        ledger = self.root.joinpath(*(SYNTHETIC_LEDGER if kind == "synthetic" else PRODUCTION_LEDGER))
        started = time.perf_counter()
        try:
            result = harness.verify(path, ledger=ledger, audit_dir=self.root / AUDIT)
        except (EvalfarmError, KeyError, TypeError, ValueError, AttributeError) as exc:
            return {"ok": False, "checks": [{"check": "artifact", "ok": False,
                                             "detail": safe.text(redact(str(exc)), 1000)}],
                    "ledger": str(ledger), "seconds": round(time.perf_counter() - started, 3)}
        return {"ok": bool(result.ok), "checks": [{"check": c, "ok": bool(ok), "detail": safe.text(d, 2000)}
                                                  for c, ok, d in result.checks],
                "ledger": str(ledger), "seconds": round(time.perf_counter() - started, 3)}

    def audit_status(self) -> dict[str, Any]:
        _, audit_mod, _ = _ab()
        path = self.root / AUDIT
        if not (path / audit_mod.CHAIN).is_file():
            return {"present": False}
        try:
            good, broken = audit_mod.verify(path)
        except EvalfarmError as exc:
            return {"present": True, "ok": False, "entries": 0, "detail": safe.text(str(exc), 500)}
        return {"present": True, "ok": broken is None, "entries": len(good),
                "detail": None if broken is None else str(broken)}

    # -- the farm (Redis) -------------------------------------------------------------------------
    def redis(self):
        if self._redis is None:
            self._redis = redis_client(self.broker)
        return self._redis

    def _input_from_store(self, rid: str, key: str) -> str | None:
        try:
            raw = self.redis().hget(f"ef:run:{rid}:items", key)
            item = json.loads(raw) if raw else None
        except Exception:  # noqa: BLE001 - the input is a nicety: no store, no input
            return None
        prompt = safe.mapping(safe.mapping(item).get("prompt"))
        return safe.opt_text(prompt.get("text"), OUTPUT_LIMIT)

    def farm_snapshot(self, max_runs: int = 50) -> dict[str, Any]:
        """Running runs (done/total, rate, ETA, errors, spend), queue depths per pool, workers seen
        (heartbeat keys), 429 pauses in force. Errors become ``{"ok": false, "error": ...}``."""
        if not self.broker:
            return {"ok": False, "configured": False, "error": "no --broker given: serve shows the farm "
                                                               "only with --broker redis://..."}
        try:
            return {"ok": True, "configured": True, "at": time.time(), **self._farm(max_runs)}
        except Exception as exc:  # noqa: BLE001 - Redis down or refusing: say so on the page
            return {"ok": False, "configured": True, "at": time.time(),
                    "error": safe.text(redact(f"{type(exc).__name__}: {exc}"), 500)}

    def _farm(self, max_runs: int) -> dict[str, Any]:
        queues, prio_sep, cost_scale, runs_index, _ = _farm()
        r = self.redis()
        run_ids = [x.decode("utf-8", "replace") for x in r.zrevrange(runs_index, 0, max_runs - 1)]
        run_ids = [x for x in run_ids if safe.is_run_id(x)]
        pipe = r.pipeline(transaction=False)
        for rid in run_ids:
            pipe.get(f"ef:run:{rid}:state")
            pipe.hgetall(f"ef:run:{rid}:counts")
            pipe.hlen(f"ef:run:{rid}:pending")
        raw = pipe.execute()
        now = time.time()
        runs = []
        for i, rid in enumerate(run_ids):
            state = (raw[3 * i] or b"").decode("utf-8", "replace")
            counts = {k.decode("utf-8", "replace"): safe.count(_int(v)) for k, v in (raw[3 * i + 1] or {}).items()}
            static = self._static_meta(r, rid)
            if static is None:
                continue
            runs.append(self._run_progress(rid, state, counts, safe.count(raw[3 * i + 2]), static, now, cost_scale))
        depth = {}
        pipe = r.pipeline(transaction=False)
        for q in queues:
            for key in [q] + [f"{q}{prio_sep}{p}" for p in range(1, 10)]:
                pipe.llen(key)
        lens = pipe.execute()
        for qi, q in enumerate(queues):
            depth[q] = sum(safe.count(n) for n in lens[qi * 10:(qi + 1) * 10])
        unacked = {q: 0 for q in queues}
        for v in r.hvals("unacked"):
            try:
                routing = json.loads(v)[2]
            except (ValueError, IndexError, TypeError, KeyError):
                continue
            if routing in unacked:
                unacked[routing] += 1
        return {"runs": runs, "queues": [{"pool": q, "queued": depth[q], "unacked": unacked[q]} for q in queues],
                "workers": self._workers(r, now), "pauses": self._pauses(r)}

    def _static_meta(self, r, rid: str) -> dict[str, Any] | None:
        """Total, spec name, adapters and start of a run: read once (the meta carries the spec)."""
        hit = self._farm_static.get(rid)
        if hit is not None:
            return hit
        try:
            meta = json.loads(r.get(f"ef:run:{rid}:meta") or b"null")
        except ValueError:
            meta = None
        if not isinstance(meta, dict):
            return None
        spec = safe.mapping(meta.get("spec"))
        static = {"total": safe.count(meta.get("total")), "spec_name": safe.text(spec.get("name"), 300),
                  "adapters": safe.str_list(meta.get("adapters")), "mode": safe.text(meta.get("mode"), 20),
                  "started_at": safe.text(meta.get("started_at"), 64)}
        if static["total"]:
            self._farm_static[rid] = static
        return static

    def _run_progress(self, rid: str, state: str, c: dict[str, int], pending: int, static: dict[str, Any],
                      now: float, cost_scale: int) -> dict[str, Any]:
        from datetime import datetime

        done, total = c.get("done", 0), static["total"]
        try:
            elapsed = max(0.0, now - datetime.fromisoformat(static["started_at"]).timestamp())
        except ValueError:
            elapsed = None
        samples = self._rates.setdefault(rid, [])
        if not samples or samples[-1][1] != done or now - samples[-1][0] > 1:
            samples.append((now, done))
        while len(samples) > 2 and now - samples[0][0] > 30:
            samples.pop(0)
        rate = None
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            rate = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        if (rate is None or rate <= 0) and elapsed:
            rate = done / elapsed if done else None
        finished = state in ("done", "cancelled", "failed", "interrupted", "budget")
        eta = None if finished or not rate or rate <= 0 else max(0.0, (total - done) / rate)
        return {"run_id": rid, "spec_name": static["spec_name"], "state": state, "done": done, "total": total,
                "errors": c.get("errors", 0), "executed": c.get("executed", 0), "pending_judge": pending,
                "spend_usd": c.get("cost_nusd", 0) / cost_scale, "elapsed_s": elapsed, "rate_per_s": rate,
                "eta_s": eta, "running": not finished,
                "per_adapter": [{"adapter": a, "done": c.get(f"done:{a}", 0), "errors": c.get(f"errors:{a}", 0),
                                 "spend_usd": c.get(f"cost_nusd:{a}", 0) / cost_scale}
                                for a in static["adapters"]]}

    def _workers(self, r, now: float) -> list[dict[str, Any]]:
        from ..executors.celery.heartbeat import KEY_PREFIX

        keys = sorted(r.scan_iter(match=f"{KEY_PREFIX}*", count=500))[:500]
        if not keys:
            return []
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.get(k)
            pipe.pttl(k)
        raw = pipe.execute()
        out = []
        for i, k in enumerate(keys):
            try:
                beat = json.loads(raw[2 * i] or b"null")
            except ValueError:
                beat = None
            beat = safe.mapping(beat)
            ts = safe.num(beat.get("ts"))
            out.append({"name": safe.text(k.decode("utf-8", "replace")[len(KEY_PREFIX):], 200),
                        "host": safe.text(beat.get("host"), 200), "pid": safe.count(beat.get("pid")),
                        "queues": safe.str_list(beat.get("queues")), "concurrency": safe.count(beat.get("concurrency")),
                        "last_heartbeat": ts, "age_s": None if ts is None else max(0.0, now - ts),
                        "ttl_ms": _int(raw[2 * i + 1])})
        return out

    def _pauses(self, r) -> list[dict[str, Any]]:
        keys = sorted(r.scan_iter(match="ef:lim:*:pause", count=500))[:500]
        if not keys:
            return []
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.pttl(k)
        out = []
        for k, ms in zip(keys, pipe.execute()):
            ms = _int(ms)
            if ms is not None and ms > 0:
                eid = k.decode("utf-8", "replace")[len("ef:lim:"):-len(":pause")]
                out.append({"endpoint": safe.text(eid, 200), "remaining_ms": ms})
        return out

    # -- metrics figures --------------------------------------------------------------------------
    def state_figures(self) -> dict[str, Any]:
        """Totals over every stored run, and the newest run of each spec (for /metrics)."""
        rows = [self.summary(p) for p in self._run_files()]
        return {"rows": rows}


def redis_client(url: str):
    """A redis-py client for the farm's Redis that fails fast, so a page never hangs."""
    from ..executors.celery.redis_tls import fail_fast_client

    return fail_fast_client(url)


def check_broker(url: str | None) -> str | None:
    """``--broker``: a Redis URL whose database is a number, or None."""
    from ..executors.celery.settings import check_redis_url

    if url is None:
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise UsageError(f"--broker {redact(url)}: serve reads the farm's Redis; give redis://HOST:6379/0")
    return check_redis_url(url, "--broker")


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _by_case(outcomes: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in outcomes:
        out.setdefault((o["adapter"], o["prompt_id"]), []).append(o)
    for v in out.values():
        v.sort(key=lambda o: o["trial"])
    return out


def _side(o: dict[str, Any]) -> dict[str, Any]:
    return {"index": o["index"], "trial": o["trial"], "status": o["status"], "failure_mode": o["failure_mode"],
            "output": o["output"], "error": o["error"], "judge_score": o["judge_score"]}


def _case_row(o: dict[str, Any]) -> dict[str, Any]:
    out = o["output"] or ""
    return {"index": o["index"], "adapter": o["adapter"], "prompt_id": o["prompt_id"], "trial": o["trial"],
            "status": o["status"], "failure_mode": o["failure_mode"], "latency_ms": o["latency_ms"],
            "judge_score": o["judge_score"], "cost_usd": o["cost_usd"] + o["judge_cost_usd"],
            "output_preview": out[:160], "error_class": o["error"]["class"] if o["error"] else None}


def _delta(d: Any) -> dict[str, Any]:
    d = safe.mapping(d)
    if "not_measured" in d:
        nm = safe.mapping(d.get("not_measured"))
        return {"measured": False, "axis": safe.text(nm.get("axis"), 40), "arms": safe.str_list(nm.get("arms")),
                "reason": safe.text(nm.get("reason"), 200)}
    ci = safe.seq(d.get("ci95"))
    lo, hi = (safe.num(ci[0]), safe.num(ci[1])) if len(ci) == 2 else (None, None)
    return {"measured": True, "a": safe.num(d.get("a")), "b": safe.num(d.get("b")), "delta": safe.num(d.get("delta")),
            "lo": lo, "hi": hi, "excludes_zero": safe.flag(d.get("ci_excludes_zero"))}


def _ab_view(data: dict[str, Any]) -> dict[str, Any]:
    problems = []
    if data.get("schema") != "evalfarm.ab_comparison/1":
        problems.append(f"schema is {safe.text(data.get('schema'), 60)!r}")
    arms_raw = safe.mapping(data.get("arms"))
    order = safe.str_list(data.get("arm_order")) or list(arms_raw)
    arms = []
    for name in order:
        a = safe.mapping(arms_raw.get(name))
        arms.append({"name": name, "profile": safe.text(a.get("profile"), 100), "role": safe.text(a.get("role"), 40),
                     "runs": safe.count(a.get("runs")), "tasks": safe.count(a.get("tasks")),
                     "pass_rate": safe.num(a.get("pass_rate")), "passes": safe.num(a.get("passes")),
                     "median_tokens": safe.num(a.get("median_tokens")), "median_usd": safe.num(a.get("median_usd")),
                     "total_usd": safe.num(a.get("total_usd")),
                     "not_measured": sorted(safe.text(k, 40) for k in safe.mapping(a.get("not_measured")))})
    comparisons = []
    for c in safe.seq(data.get("comparisons")):
        c = safe.mapping(c)
        comparisons.append({"a": safe.text(c.get("a"), 100), "b": safe.text(c.get("b"), 100),
                            "label": safe.text(c.get("label"), 60), "honest": c.get("honest") is True,
                            "deltas": {safe.text(k, 60): _delta(v) for k, v in safe.mapping(c.get("deltas")).items()}})
    comparisons.sort(key=lambda c: not c["honest"])  # honest first
    v = safe.mapping(data.get("verdict"))
    suite = safe.mapping(data.get("suite"))
    return {"suite": {"name": safe.text(suite.get("name"), 200), "tasks": safe.count(suite.get("tasks")),
                      "scorer": safe.text(suite.get("scorer"), 40), "sha256": safe.text(suite.get("sha256"), 80)},
            "executor": safe.text(safe.mapping(data.get("executor")).get("kind"), 40),
            "trials": safe.count(data.get("trials")), "arms_mode": safe.count(data.get("arms_mode")),
            "plan": safe.text(data.get("plan"), 80), "arms": arms, "comparisons": comparisons,
            "verdict": {"result": safe.text(v.get("result"), 40), "winner": safe.opt_text(v.get("winner"), 100),
                        "decided_by": safe.opt_text(v.get("decided_by"), 40), "reason": safe.text(v.get("reason"), 2000),
                        "a": safe.text(v.get("a"), 100), "b": safe.text(v.get("b"), 100)},
            "parameters": {safe.text(k, 60): safe.text(x, 60) for k, x in safe.mapping(data.get("parameters")).items()},
            "problems": problems}


def check_state_dir(path: Path) -> None:
    """A state dir that exists but is a file is bad usage; a missing one is fine (nothing yet)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--state-dir {path}: is not a directory")
