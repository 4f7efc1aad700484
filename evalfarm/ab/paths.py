"""Default locations, under the state dir (``EVALFARM_STATE_DIR``, default ``.evalfarm``)."""
from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("EVALFARM_STATE_DIR") or ".evalfarm")


def synthetic_ledger() -> Path:
    """The synthetic executor's own spend ledger: never the production one."""
    return state_dir() / "ab" / "ledger.jsonl"


def production_ledger() -> Path:
    """The real spend ledger (provider runs; spawned agents later)."""
    return state_dir() / "cost" / "ledger.jsonl"


def reports_dir() -> Path:
    return state_dir() / "reports" / "eval_ab"


def audit_dir() -> Path:
    return state_dir() / "audit"
