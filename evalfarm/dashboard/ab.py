"""A/B comparison artifacts as the pages read them (``<state>/reports/eval_ab/<sha256>.json``), ``ab
verify`` run on view with the state dir's ledger and audit chain, and the audit chain's status."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import safe
from .reports import ReportError
from .safe import BadRef
from ..errors import EvalfarmError
from ..redact import redact
from ..runs.state import StateDir

MAX_ARTIFACT_BYTES = 64 << 20


def _modules():
    """The A/B modules, imported when an A/B page is first viewed."""
    from ..ab import audit, harness

    return audit, harness


class AbView:
    def __init__(self, state: StateDir) -> None:
        self.state = state
        self._cache: dict[str, tuple[tuple, dict[str, Any]]] = {}

    @property
    def folder(self) -> Path:
        return self.state.ab_reports

    def artifacts(self) -> list[dict[str, Any]]:
        try:
            names = sorted(n for n in self.folder.iterdir() if n.name.endswith(".json"))
        except OSError:
            return []
        rows = []
        for n in names:
            try:
                sha = safe.sha256_name(n.name[:-5])
            except BadRef:
                continue
            rows.append(self._summary(sha))
        rows.sort(key=lambda r: r.get("mtime") or 0, reverse=True)
        return rows

    def _load(self, sha: str) -> tuple[dict[str, Any], float]:
        path = self.folder / f"{safe.sha256_name(sha)}.json"
        try:
            st = path.stat()
        except FileNotFoundError:
            raise BadRef(f"no A/B artifact {sha}", 404) from None
        if st.st_size > MAX_ARTIFACT_BYTES:
            raise ReportError(f"the artifact is {st.st_size >> 20} MiB; too big to show")
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        hit = self._cache.get(sha)
        if hit is not None and hit[0] == key:
            return hit[1], st.st_mtime
        from .jsonscan import TooBig, loads

        try:
            data = loads(path.read_bytes())
        except (OSError, TooBig) as exc:
            raise ReportError(f"unreadable artifact: {exc}") from None
        if not isinstance(data, dict):
            raise ReportError("the artifact is not a JSON object")
        self._cache[sha] = (key, data)
        return data, st.st_mtime

    def _summary(self, sha: str) -> dict[str, Any]:
        try:
            data, mtime = self._load(sha)
        except (BadRef, ReportError) as exc:
            return {"sha256": sha, "error": str(exc), "mtime": None}
        view = ab_view(data)
        return {"sha256": sha, "mtime": mtime, "suite": view["suite"], "executor": view["executor"],
                "arms": [a["name"] for a in view["arms"]], "verdict": view["verdict"], "trials": view["trials"],
                "error": None if not view["problems"] else "; ".join(view["problems"])}

    def artifact(self, sha: str) -> dict[str, Any]:
        data, mtime = self._load(sha)
        return {"sha256": sha, "mtime": mtime, **ab_view(data)}

    def tasks(self, sha: str) -> list[dict[str, Any]]:
        """Per (task, trial): each arm's verdict, failure class and trajectory, from the ledger rows the
        artifact names (the state dir's ledger); tasks an arm failed first. Empty when the ledger is not here."""
        from ..runs import ledger as ledger_mod

        data, _ = self._load(sha)
        kind = safe.mapping(data.get("executor")).get("kind")
        path = self.state.synthetic_ledger if kind == "synthetic" else self.state.cost_ledger
        try:
            index = ledger_mod.load(path)
        except EvalfarmError:
            return []
        view = ab_view(data)
        pairs: dict[tuple[str, int], dict[str, Any]] = {}
        for arm in [a["name"] for a in view["arms"]]:
            for ref in safe.seq(safe.mapping(safe.mapping(data.get("arms")).get(arm)).get("ledger_rows")):
                row = index.get(ref) if isinstance(ref, str) else None
                r = safe.mapping(row.data if row is not None else None)
                if not r:
                    continue
                task, trial = safe.text(r.get("task"), 200), safe.count(r.get("trial"))
                entry = pairs.setdefault((task, trial), {"task": task, "trial": trial, "arms": {}})
                traj = r.get("trajectory_sha256")
                entry["arms"][arm] = {
                    "passed": safe.flag(r.get("passed")), "class": safe.opt_text(r.get("failure_class"), 40),
                    "trajectory": traj if isinstance(traj, str) and safe.is_sha256(traj) else None}
        out = list(pairs.values())
        for e in out:
            e["failed"] = any(a["passed"] is not True for a in e["arms"].values())
        out.sort(key=lambda e: (not e["failed"], e["task"], e["trial"]))
        return out

    def verify(self, sha: str) -> dict[str, Any]:
        """``evalfarm ab verify`` on the artifact, with the state dir's ledger and audit chain."""
        path = self.folder / f"{safe.sha256_name(sha)}.json"
        if not path.is_file():
            raise BadRef(f"no A/B artifact {sha}", 404)
        _, harness = _modules()
        data, _ = self._load(sha)
        kind = safe.mapping(data.get("executor")).get("kind")
        ledger = self.state.synthetic_ledger if kind == "synthetic" else self.state.cost_ledger
        started = time.perf_counter()
        try:
            result = harness.verify(path, ledger=ledger, audit_dir=self.state.audit)
        except (EvalfarmError, KeyError, TypeError, ValueError, AttributeError) as exc:
            return {"ok": False, "checks": [{"check": "artifact", "ok": False,
                                             "detail": safe.text(redact(str(exc)), 1000)}],
                    "ledger": str(ledger), "seconds": round(time.perf_counter() - started, 3)}
        return {"ok": bool(result.ok), "checks": [{"check": c, "ok": bool(ok), "detail": safe.text(d, 2000)}
                                                  for c, ok, d in result.checks],
                "ledger": str(ledger), "seconds": round(time.perf_counter() - started, 3)}

    def audit_status(self) -> dict[str, Any]:
        audit, _ = _modules()
        path = self.state.audit
        if not (path / audit.CHAIN).is_file():
            return {"present": False}
        try:
            good, broken = audit.verify(path)
        except EvalfarmError as exc:
            return {"present": True, "ok": False, "entries": 0, "detail": safe.text(str(exc), 500)}
        return {"present": True, "ok": broken is None, "entries": len(good),
                "detail": None if broken is None else str(broken)}


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


MAX_ROUNDS_SHOWN = 1000


def _sequential(raw: Any) -> dict[str, Any] | None:
    """A sequential artifact's design, stopping point and confidence sequence (untrusted: every field checked)."""
    if raw is None:
        return None
    q = safe.mapping(raw)
    history = []
    for h in safe.seq(q.get("history"))[:MAX_ROUNDS_SHOWN]:
        h = safe.mapping(h)
        lo, hi, est = safe.num(h.get("lo")), safe.num(h.get("hi")), safe.num(h.get("estimate"))
        if lo is None or hi is None or est is None:
            continue
        history.append({"round": safe.count(h.get("round")), "n": safe.count(h.get("n")), "lo": lo, "hi": hi,
                        "estimate": est, "decision": safe.text(h.get("decision"), 20)})
    saved = safe.mapping(q.get("items_saved"))
    fixed = safe.mapping(q.get("fixed_design"))
    return {"method": safe.text(q.get("method"), 40), "alpha": safe.num(q.get("alpha")),
            "margin": safe.num(q.get("margin")) or 0.0, "max_trials": safe.count(q.get("max_trials")),
            "rounds": safe.count(q.get("rounds")), "decision": safe.text(q.get("decision"), 20),
            "decision_round": safe.count(q.get("decision_round")) or None,
            "stopped_because": safe.text(q.get("stopped_because"), 40), "history": history,
            "saved_vs_max": safe.num(saved.get("vs_max_trials")), "saved_vs_power": safe.num(saved.get("vs_power_sized")),
            "fixed_trials": safe.num(fixed.get("trials_per_task"))}


def ab_view(data: dict[str, Any]) -> dict[str, Any]:
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
            "sequential": _sequential(data.get("sequential")), "problems": problems}
