"""structlog set-up: JSON lines when not on a terminal, readable on one; secrets redacted."""
from __future__ import annotations

import logging
import sys

import structlog

from .redact import redact


def _redact_processor(_, __, event_dict):
    return {k: redact(v) if isinstance(v, str) else v for k, v in event_dict.items()}


def configure(level: str = "WARNING") -> None:
    renderer = structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty() \
        else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    _redact_processor, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.WARNING)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
