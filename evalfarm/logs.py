"""structlog set-up: JSON lines when not on a terminal, readable on one; secrets redacted.

structlog (and, through its console renderer, rich) costs ~50 ms to import, and a run
that logs nothing should not pay it: ``get_logger`` returns a logger that imports and
configures structlog on its first message.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

from .redact import redact

_LEVEL = "WARNING"
_CONFIGURED = False


def _redact_processor(_, __, event_dict):
    return {k: redact(v) if isinstance(v, str) else v for k, v in event_dict.items()}


def _apply() -> None:
    global _CONFIGURED
    import structlog

    renderer = structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty() \
        else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    _redact_processor, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, _LEVEL.upper(), logging.WARNING)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    _CONFIGURED = True


def configure(level: str = "WARNING") -> None:
    """Set the level; structlog itself is configured on the first message (or now, if loaded)."""
    global _LEVEL
    _LEVEL = level
    if _CONFIGURED or "structlog" in sys.modules:
        _apply()


class _LazyLogger:
    def __init__(self, name: str) -> None:
        self._name, self._log = name, None

    def __getattr__(self, attr: str) -> Any:
        if self._log is None:
            if not _CONFIGURED:
                _apply()
            import structlog

            self._log = structlog.get_logger(self._name)
        return getattr(self._log, attr)


def get_logger(name: str) -> Any:
    return _LazyLogger(name)
