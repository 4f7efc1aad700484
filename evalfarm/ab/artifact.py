"""The comparison artifact: built from ledger rows, canonical, content-addressed, verifiable.

``build(header, rows_by_arm)`` is the one function that turns a header (what was compared:
suite, executor, arms, ledger row references) and the referenced rows into the artifact;
``verify`` resolves the references in a ledger and calls it again, so every aggregate is
recomputed from concrete rows. Bytes are ``canonical_json`` (sorted keys, compact
separators, ASCII escapes) with no timestamps; the file is ``<sha256 of the bytes>.json``.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..canonical import canonical_json, sha256_hex
from ..errors import UsageError
from ..perms import make_dir
from . import compare, sequential

SCHEMA = "evalfarm.ab_comparison/1"
EVENT = "eval.ab_comparison"
HEADER_KEYS = ("schema", "event", "plan", "suite", "executor", "trials", "arms_mode", "role", "arm_order",
               "pairs", "profiles")


def build(header: dict[str, Any], rows_by_arm: dict[str, list[tuple[str, dict[str, Any]]]],
          parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full artifact. ``header["arms"][name]`` carries profile, role and addendum hash; ``parameters``
    are a verified artifact's own (default: today's), so an artifact is rebuilt by the rules it was made by."""
    parameters = parameters if parameters is not None else compare.parameters()
    arms: dict[str, Any] = {}
    rows_only = {arm: [row for _, row in rows_by_arm[arm]] for arm in header["arm_order"]}
    for arm in header["arm_order"]:
        meta = header["arms"][arm]
        arms[arm] = {"profile": meta["profile"], "role": meta["role"], "addendum_sha256": meta["addendum_sha256"],
                     "ledger_rows": [ref for ref, _ in rows_by_arm[arm]], **compare.arm_figures(rows_only[arm])}
    legacy = compare.is_legacy(parameters)
    comparisons = []
    for pair in header["pairs"]:
        a, b = pair["a"], pair["b"]
        comparisons.append({**pair, "deltas": compare.compare_arms(a, rows_only[a], arms[a], b, rows_only[b], arms[b],
                                                                   legacy)})
    honest = next(c for c in comparisons if c["honest"])
    ha, hb = honest["a"], honest["b"]
    out = {k: header[k] for k in HEADER_KEYS}
    out.update(arms=arms, comparisons=comparisons, parameters=parameters)
    if "sequential" in header:  # rounds until the anytime-valid test decided: its decision is the verdict
        seq = sequential.block(header["sequential"], rows_only[ha], rows_only[hb], len(header["arm_order"]))
        out.update(sequential=seq, verdict={"a": ha, "b": hb, **sequential.verdict(
            ha, arms[ha], hb, arms[hb], honest["deltas"], seq)})
        return out
    out.update(verdict={"a": ha, "b": hb,
                        **compare.verdict(ha, arms[ha], hb, arms[hb], honest["deltas"],
                                          parameters.get("noninferiority_margin"),
                                          None if legacy else (rows_only[ha], rows_only[hb]))})
    return out


def header_of(artifact: dict[str, Any]) -> dict[str, Any]:
    header = {k: artifact[k] for k in HEADER_KEYS}
    header["arms"] = {name: {"profile": a["profile"], "role": a["role"], "addendum_sha256": a["addendum_sha256"]}
                      for name, a in artifact["arms"].items()}
    if "sequential" in artifact:
        header["sequential"] = sequential.design_of(artifact["sequential"])
    return header


def to_bytes(artifact: dict[str, Any]) -> bytes:
    return canonical_json(artifact).encode("ascii")


class Staged:
    """The artifact written to a temp file beside its final name; ``publish`` renames it into place,
    ``discard`` removes it. Staging first proves the reports dir is writable before the audit append."""

    def __init__(self, reports_dir: Path, data: bytes) -> None:
        self.data = data
        self.path = Path(reports_dir) / f"{sha256_hex(data)}.json"
        try:
            make_dir(self.path.parent)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise UsageError(f"cannot write the artifact to {reports_dir}: {exc.strerror or exc}") from None
        self.tmp = Path(tmp)

    def publish(self) -> Path:
        if self.path.is_file() and self.path.read_bytes() == self.data:
            self.tmp.unlink(missing_ok=True)  # identical bytes already there: a no-op
        else:
            os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def load(path: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read artifact {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError
    except (ValueError, RecursionError):
        raise UsageError(f"{path}: not an evalfarm A/B comparison artifact (schema {SCHEMA})") from None
    problem = shape_problem(data)
    if problem:
        raise UsageError(f"{path}: not an evalfarm A/B comparison artifact ({problem})")
    return raw, data


def _str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def shape_problem(art: dict[str, Any]) -> str | None:
    """What in an artifact's shape ``verify`` could not work with (it is untrusted input), else None.
    Values are left to verify: a wrong figure is NOT VERIFIED, a wrong type is a bad input."""
    missing = [k for k in (*HEADER_KEYS, "arms", "verdict") if k not in art]
    if missing:
        return f"missing {', '.join(missing)}"
    order, arms = art["arm_order"], art["arms"]
    if not isinstance(order, list) or not order or not all(isinstance(a, str) for a in order) \
            or len(set(order)) != len(order):
        return "arm_order: expected a list of arm names"
    if not isinstance(arms, dict) or set(arms) != set(order):
        return "arms: expected an object with one entry per arm of arm_order"
    for name, arm in arms.items():
        if not isinstance(arm, dict) or not isinstance(arm.get("profile"), str) \
                or not isinstance(arm.get("role"), str) or not _str_or_none(arm.get("addendum_sha256")):
            return f"arms.{name}: expected an object with profile, role and addendum_sha256"
        rows = arm.get("ledger_rows")
        if not isinstance(rows, list) or not all(isinstance(r, str) for r in rows):
            return f"arms.{name}.ledger_rows: expected a list of row references"
    pairs = art["pairs"]
    if not isinstance(pairs, list) or not all(
            isinstance(x, dict) and isinstance(x.get("a"), str) and isinstance(x.get("b"), str)
            and x["a"] in arms and x["b"] in arms and isinstance(x.get("honest"), bool)
            and isinstance(x.get("label"), str) for x in pairs) or sum(1 for x in pairs if x["honest"]) != 1:
        return "pairs: expected a list of {a, b, label, honest} over the arms, one of them honest"
    for key in ("plan", "role", "event"):
        if not isinstance(art[key], str):
            return f"{key}: expected a string"
    suite, executor, verdict = art["suite"], art["executor"], art["verdict"]
    if not isinstance(suite, dict) or not isinstance(suite.get("name"), str) or not isinstance(suite.get("sha256"), str):
        return "suite: expected an object with name and sha256"
    if not isinstance(executor, dict) or not isinstance(executor.get("kind"), str):
        return "executor: expected an object with kind"
    if not isinstance(verdict, dict) or not all(_str_or_none(verdict.get(k)) for k in ("a", "b", "result", "winner")):
        return "verdict: expected an object with a, b, result and winner"
    if "sequential" in art:
        problem = sequential.shape_problem(art["sequential"])
        if problem:
            return problem
    params = art.get("parameters")
    margin = params.get("noninferiority_margin") if isinstance(params, dict) else None
    if params is not None and (not isinstance(params, dict) or not (
            margin is None or (isinstance(margin, (int, float)) and not isinstance(margin, bool)))):
        return "parameters: expected an object whose noninferiority_margin is a number"
    if isinstance(params, dict) and "quality_interval" in params and params["quality_interval"] != compare.QUALITY_INTERVAL:
        return f"parameters.quality_interval: unknown method (this evalfarm computes {compare.QUALITY_INTERVAL!r})"
    return None


def row_problem(row: dict[str, Any]) -> str | None:
    """A ledger row's fields as the figures read them, else the first that is not."""
    if not isinstance(row.get("task"), str):
        return "task is not a string"
    for key in ("input_tokens", "output_tokens"):
        v = row.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            return f"{key} is not a whole number"
    v = row.get("cost_usd")
    if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
        return "cost_usd is not a number"
    if row.get("passed") is not None and not isinstance(row["passed"], bool):
        return "passed is not true/false"
    trial = row.get("trial")
    if trial is not None and (not isinstance(trial, int) or isinstance(trial, bool) or trial < 0):
        return "trial is not a whole number"
    return None


def verify_rows(artifact: dict[str, Any], index: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """Resolve every referenced row and rebuild; returns (problems, rebuilt artifact or None)."""
    problems: list[str] = []
    rows_by_arm: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for arm in artifact["arm_order"]:
        rows_by_arm[arm] = []
        for ref in artifact["arms"][arm]["ledger_rows"]:
            row = index.get(ref)
            if row is None:
                problems.append(f"arm {arm}: ledger row {ref[:16]} not found (the row was edited or removed)")
                continue
            if row.data is None:
                problems.append(f"arm {arm}: ledger line {row.line} is not a JSON object")
                continue
            if row_problem(row.data):
                problems.append(f"arm {arm}: ledger line {row.line}: {row_problem(row.data)}")
                continue
            if row.data.get("arm") != arm or row.data.get("plan") != artifact["plan"]:
                problems.append(f"arm {arm}: ledger line {row.line} belongs to arm {row.data.get('arm')!r} "
                                f"of plan {str(row.data.get('plan'))[:12]}")
                continue
            rows_by_arm[arm].append((ref, row.data))
    if problems:
        return problems, None
    params = artifact.get("parameters")
    rebuilt = build(header_of(artifact), rows_by_arm, params if isinstance(params, dict) else None)
    for key in sorted(set(rebuilt) | set(artifact)):
        if rebuilt.get(key) != artifact.get(key):
            problems.append(f"{key}: the artifact's figures differ from those recomputed from the ledger rows")
    return problems, rebuilt
