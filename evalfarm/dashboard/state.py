"""What ``evalfarm serve`` reads, one part per source, all read-only: the saved runs (``runs``, through
``reports``), the registry (``registry``), the A/B artifacts and audit chain (``ab``) and, with a
broker URL, the farm's run store (``farm``). The layout of the state dir is ``runs.state.StateDir``'s."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .ab import AbView
from .farm import FarmView
from .registry import RegistryView
from . import safe, trajectory
from .runs import Runs
from ..errors import UsageError
from ..runs.state import StateDir


class State:
    """Read-only view of one state dir (and, with a broker URL, the farm's run store)."""

    def __init__(self, root: Path | str, broker: str | None = None) -> None:
        self.dir = StateDir.of(Path(root))
        self.root = self.dir.root
        self.broker = broker
        self.registry = RegistryView(self.dir.registry_db)
        self.runs = Runs(self.dir.runs, self.registry)
        self.ab = AbView(self.dir)
        self.farm = FarmView(broker)

    def case(self, rid: str, index: int) -> dict[str, Any]:
        """A case, its input from the report or, when the report has none, from the farm's run store."""
        from .reports import SHOWN_CHARS

        c = self.runs.case(rid, index)
        if c.get("trajectory_sha256"):
            c["trajectory"] = trajectory.load(self.dir.blobs, c["trajectory_sha256"])
        for kind, sha in (c.get("artifacts") or {}).items():
            if sha:
                c[kind] = trajectory.load_text(self.dir.blobs, sha, kind)
        if c["input"] is None and self.broker and c["key"]:
            c["input"] = self.farm.item_input(rid, c["key"], SHOWN_CHARS)
            c["input_source"] = "farm run store" if c["input"] is not None else None
        return c

    def trajectory(self, sha: str) -> dict[str, Any]:
        """A stored trajectory's timeline by its SHA-256 (the A/B page's side by side)."""
        return trajectory.load(self.dir.blobs, safe.sha256_name(sha))

    def refs(self) -> list[str]:
        """What the diff page offers: baselines, then the newest runs."""
        runs = self.runs.list(per_page=200)["runs"]
        return [f"baseline:{b}" for b in self.registry.baselines()] + [r["run_id"] for r in runs]


def check_state_dir(path: Path) -> None:
    """A state dir that exists but is a file is bad usage; a missing one is fine (nothing yet)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--state-dir {path}: is not a directory")
