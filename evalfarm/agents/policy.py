"""Whether this process may run an agent task unsandboxed (``isolation: none``).

In process, ``none`` is the caller's explicit choice on their own machine. A spawn worker runs other
people's suites: it refuses ``none`` unless started with ``evalfarm worker --pool spawn
--allow-unsandboxed`` (spawn.py calls ``require_sandbox`` at its start)."""
from __future__ import annotations

_REQUIRED = False

REFUSED = ("isolation none is refused on this spawn worker (it runs agents sandboxed only): start the worker with "
           "`evalfarm worker --pool spawn --allow-unsandboxed` to allow it, or drop `isolation: none` from the "
           "workspace")


def require_sandbox(required: bool = True) -> None:
    global _REQUIRED
    _REQUIRED = required


def sandbox_required() -> bool:
    return _REQUIRED
