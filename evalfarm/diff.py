"""Per-adapter deltas between two runs, with a winner inside a tolerance band."""
from __future__ import annotations

from typing import Any


def _winner(delta: float, tolerance: float) -> str:
    if delta > tolerance:
        return "b"
    if delta < -tolerance:
        return "a"
    return "tie"


def diff_reports(a: dict[str, Any], b: dict[str, Any], tolerance: float = 0.01) -> dict[str, Any]:
    """An adapter present in one run only counts 0 on the other side."""
    adapters = list(a["per_adapter"]) + [x for x in b["per_adapter"] if x not in a["per_adapter"]]
    rows: dict[str, dict[str, Any]] = {}
    for adapter in adapters:
        fa, fb = a["per_adapter"].get(adapter, {}), b["per_adapter"].get(adapter, {})
        oa, ob = fa.get("overall") or 0.0, fb.get("overall") or 0.0
        ga, gb = fa.get("golden_pass_rate") or 0.0, fb.get("golden_pass_rate") or 0.0
        rows[adapter] = {
            "overall_a": oa, "overall_b": ob, "overall_delta": round(ob - oa, 6),
            "golden_rate_a": ga, "golden_rate_b": gb, "golden_rate_delta": round(gb - ga, 6),
            "in_a": adapter in a["per_adapter"], "in_b": adapter in b["per_adapter"],
            "winner": _winner(ob - oa, tolerance),
        }
    mean_a = sum(r["overall_a"] for r in rows.values()) / len(rows) if rows else 0.0
    mean_b = sum(r["overall_b"] for r in rows.values()) / len(rows) if rows else 0.0
    return {"a": a.get("run_id"), "b": b.get("run_id"), "tolerance": tolerance, "per_adapter": rows,
            "overall_a": round(mean_a, 6), "overall_b": round(mean_b, 6),
            "overall_delta": round(mean_b - mean_a, 6), "winner": _winner(mean_b - mean_a, tolerance)}
