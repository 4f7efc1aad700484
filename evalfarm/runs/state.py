"""The state dir's layout, written once: every path of a run's life is asked of a ``StateDir``.

A state dir (``--state-dir``, ``EVALFARM_STATE_DIR``, default ``.evalfarm``) holds the saved runs, the
registry, the spend ledgers, the A/B artifacts, the audit chain, the agents' content-addressed blobs
and the response cache. Whoever needs a path is handed the ``StateDir`` (or a path from it); nothing
passes it through the environment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT = Path(".evalfarm")
ENV = "EVALFARM_STATE_DIR"
REGISTRY_DB = "registry.db"


@dataclass(frozen=True)
class StateDir:
    root: Path

    @classmethod
    def of(cls, path: "Path | str | StateDir | None" = None) -> "StateDir":
        """``path``, else ``$EVALFARM_STATE_DIR`` (a worker's or a user's setting), else ``.evalfarm``."""
        if isinstance(path, StateDir):
            return path
        return cls(Path(path) if path is not None else Path(os.environ.get(ENV) or DEFAULT))

    @property
    def runs(self) -> Path:
        """Saved reports: ``<run_id>.json``, ``.md`` and ``.lineage.json``."""
        return self.root / "runs"

    @property
    def registry_db(self) -> Path:
        return self.root / REGISTRY_DB

    @property
    def cost_ledger(self) -> Path:
        """The production spend ledger (agent items, provider A/B arms)."""
        return self.root / "cost" / "ledger.jsonl"

    @property
    def synthetic_ledger(self) -> Path:
        """The synthetic A/B executor's own ledger: never the production one."""
        return self.root / "ab" / "ledger.jsonl"

    @property
    def ab_reports(self) -> Path:
        """Content-addressed A/B comparison artifacts and their pair index."""
        return self.root / "reports" / "eval_ab"

    @property
    def audit(self) -> Path:
        return self.root / "audit"

    @property
    def seal_key(self) -> Path:
        """The HMAC key that seals each saved report's hash in the registry (``runs.trust``): 0600 in
        a 0700 directory, made on the first save."""
        return self.root / "keys" / "reports.key"

    @property
    def blobs(self) -> Path:
        """Agents' patches, check logs and trajectories, by SHA-256 (``EVALFARM_BLOB_DIR`` puts them
        elsewhere, e.g. a volume every spawn worker shares)."""
        return Path(os.environ.get("EVALFARM_BLOB_DIR") or self.root / "blobs")

    @property
    def cache_db(self) -> Path:
        """The in-process response cache (``run --cache``)."""
        return self.root / "cache.sqlite"

    def has_registry(self) -> bool:
        return self.registry_db.is_file()
