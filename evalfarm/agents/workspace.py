"""A spec's workspace, pinned before anything is queued (``runs/`` calls this; loading a spec runs no git).

Agents and a workspace must go together (``EvalSpec.spawn_problem``); the repo must exist (a local
path, relative to the spec file, becomes absolute; a git URL is mirrored) and ``base`` must name a
commit, which replaces it: every trial, on every worker, starts from that exact tree.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .errors import SandboxError
from .repos import is_url, local_repo
from ..errors import SpecError
from ..spec.models import EvalSpec, Workspace
from ..spec.sourcemap import dotted

Where = Callable[..., dict[str, Any]]


def pin_workspace(ws: Workspace, base_dir: Path, where: Where | None = None,
                  at: tuple = ("workspace",)) -> Workspace:
    """The workspace with an absolute repo (or its URL) and ``base`` as a commit; a missing repo or
    an unknown base is a SpecError at ``at + (field,)``."""
    where = where or (lambda *loc: {})
    repo = ws.repo if is_url(ws.repo) else str((Path(base_dir) / ws.repo).resolve())
    try:
        _, commit = local_repo(repo, ws.base)
    except SandboxError as exc:
        field = getattr(exc, "field", "repo")
        raise SpecError(str(exc), field=dotted((*at, field)), **where(*at, field)) from None
    return ws.model_copy(update={"repo": repo, "base": commit})


def resolve_workspace(spec: EvalSpec, base_dir: Path, where: Where | None = None) -> EvalSpec:
    where = where or (lambda *loc: {})
    problem = spec.spawn_problem()
    if problem is not None:
        loc, message = problem
        raise SpecError(message, field=dotted(loc), **where(*loc))
    if spec.workspace is None:
        return spec
    return spec.model_copy(update={"workspace": pin_workspace(spec.workspace, base_dir, where)})


def pin_spec_file(spec_file):
    """A ``SpecFile`` whose workspace (if any) is pinned, errors pointing into its file."""
    if spec_file.spec.workspace is None:
        return spec_file
    return spec_file.with_spec(resolve_workspace(spec_file.spec, spec_file.base_dir, spec_file.where))
