"""An agent item's trajectory (agents/trajectory.py) as the case page's timeline: read from the blob
directory by its SHA-256 (the item's ``agent.trajectory_sha256``), every field checked and cut here, so
a damaged or hostile file shows as text or not at all (the template escapes everything it prints)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import safe

MAX_STEPS = 2000  # steps shown; the rest are counted
MAX_BYTES = 64 * 1024 * 1024
SHOWN = 4000  # characters of a step's text, arguments or result
_SHA = re.compile(r"[0-9a-f]{64}")
SOURCES = ("model_call", "agent", "tool_call", "tool_result")


def ref(outcome: dict[str, Any], field: str = "trajectory_sha256") -> str | None:
    agent = outcome.get("agent")
    sha = agent.get(field) if isinstance(agent, dict) else None
    return sha if isinstance(sha, str) and _SHA.fullmatch(sha) else None


def artifact_refs(outcome: dict[str, Any]) -> dict[str, str | None]:
    """The item's patch and check log blobs (agents/adapter.py stores them): their SHA-256 or None."""
    agent = outcome.get("agent") if isinstance(outcome.get("agent"), dict) else {}
    diff = agent.get("diff") if isinstance(agent.get("diff"), dict) else {}
    check = agent.get("check") if isinstance(agent.get("check"), dict) else {}
    out = {}
    for name, sha in (("patch", diff.get("patch_sha256")), ("log", check.get("output_sha256"))):
        out[name] = sha if isinstance(sha, str) and _SHA.fullmatch(sha) else None
    return out


PATCH_SHOWN = 256 * 1024  # bytes of a patch or a check log shown on the case page


def load_text(blobs: Path, sha: str, kind: str) -> dict[str, Any]:
    """A stored patch (``kind`` patch) or check log (log) as text, its first ``PATCH_SHOWN`` bytes;
    a patch's lines classed for colour (the template escapes them)."""
    path = blobs / f"{sha}.{kind}"
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            data = f.read(PATCH_SHOWN)
    except FileNotFoundError:
        return {"missing": f"not in this dashboard's blob directory ({blobs})"}
    except OSError as exc:
        return {"missing": f"unreadable ({type(exc).__name__})"}
    text = data.decode("utf-8", "replace")
    out: dict[str, Any] = {"sha256": sha, "bytes": size, "cut": size > PATCH_SHOWN}
    if kind == "patch":
        out["lines"] = [(_line_class(line), line) for line in text.splitlines()]
    else:
        out["text"] = text
    return out


def _line_class(line: str) -> str:
    if line.startswith(("+++", "---", "diff ", "index ")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"


def _step(s: Any) -> dict[str, Any] | None:
    if not isinstance(s, dict) or s.get("source") not in SOURCES:
        return None
    seen = s.get("seen_by")
    seen = [x for x in seen if x in ("agent", "relay")] if isinstance(seen, list) else []
    out: dict[str, Any] = {"source": s["source"], "timestamp": safe.opt_text(s.get("timestamp"), 40),
                           "only": seen[0] if len(seen) == 1 else None}
    if s["source"] == "model_call":
        out.update(model=safe.opt_text(s.get("model"), 120), input_tokens=safe.num(s.get("input_tokens")),
                   output_tokens=safe.num(s.get("output_tokens")), latency_ms=safe.num(s.get("latency_ms")),
                   cost_usd=safe.num(s.get("cost_usd")),
                   cached_input_tokens=safe.num(s.get("cached_input_tokens")), scope=safe.opt_text(s.get("scope"), 20))
    elif s["source"] == "agent":
        out.update(text=safe.text(s.get("text"), SHOWN), thinking=s.get("thinking") is True)
    elif s["source"] == "tool_call":
        try:
            args = json.dumps(s.get("arguments"), ensure_ascii=False, indent=1)
        except (TypeError, ValueError):
            args = ""
        out.update(name=safe.text(s.get("name"), 200), arguments=safe.text(args, SHOWN),
                   call_id=safe.opt_text(s.get("tool_call_id"), 120))
    else:
        cut = s.get("cut") if isinstance(s.get("cut"), dict) else None
        out.update(content=safe.text(s.get("content"), SHOWN), is_error=s.get("is_error") is True,
                   exit_code=safe.num(s.get("exit_code")), call_id=safe.opt_text(s.get("tool_call_id"), 120),
                   original_chars=safe.num(cut.get("original_chars")) if cut else None)
    return out


def load(blobs: Path, sha: str) -> dict[str, Any]:
    """The timeline, or ``{"missing": why}``."""
    path = blobs / f"{sha}.trajectory.json"
    try:
        if path.stat().st_size > MAX_BYTES:
            return {"missing": f"the trajectory is larger than {MAX_BYTES >> 20} MiB"}
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {"missing": f"not in this dashboard's blob directory ({blobs})"}
    except (OSError, ValueError) as exc:
        return {"missing": f"unreadable ({type(exc).__name__})"}
    raw = data.get("steps") if isinstance(data, dict) else None
    raw = raw if isinstance(raw, list) else []
    steps = [x for x in (_step(s) for s in raw[:MAX_STEPS]) if x is not None]
    totals = data.get("totals") if isinstance(data.get("totals"), dict) else {}
    agreement = data.get("agreement") if isinstance(data.get("agreement"), dict) else {}
    sources = data.get("sources") if isinstance(data.get("sources"), list) else []
    return {"sha256": sha, "agent": safe.opt_text(data.get("agent"), 40), "steps": steps,
            "sources": [x for x in sources if x in ("agent", "relay")],
            "mismatch": safe.text(agreement.get("why"), 600) if agreement.get("mismatched") is True else None,
            "relay_only": safe.opt_text(agreement.get("relay_only"), 300),
            "not_shown": max(0, len(raw) - MAX_STEPS),
            "input_tokens": safe.num(totals.get("input_tokens")), "output_tokens": safe.num(totals.get("output_tokens")),
            "cost_usd": safe.num(totals.get("cost_usd"))}
