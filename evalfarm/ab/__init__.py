"""The A/B harness: two or three response-style arms over one suite, one verifiable artifact.

Modules, each named after what it does: ``profiles`` (addenda), ``tasks`` (YAML inputs),
``executors`` (how arms run; the offline adapters), ``choose`` (``--executor``), ``provider`` (the real-model executor),
``ledger`` (spend rows referenced by SHA-256), ``compare`` (medians, pass rates, bootstrap
intervals, verdicts), ``artifact`` (canonical, content-addressed, rebuildable from rows),
``audit`` (the HMAC chain), ``pair_index`` and ``harness`` (both modes, end to end).
Nothing here imports Celery or Redis: the farm is passed in as ``run_spec``.
"""
from typing import Any

__all__ = ["run_suite", "run_variants", "verify"]


def __getattr__(name: str) -> Any:  # lazy: importing an executor (a worker resolving ab-echo) stays light
    if name in __all__:
        from . import harness

        return getattr(harness, name)
    raise AttributeError(name)
