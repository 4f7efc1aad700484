"""Every evalfarm internal the interop package uses, imported in one place.

The package is being reorganised (issue 9); when modules move, only these imports change.
"""
from __future__ import annotations

from ..artifacts import atomic_write, load_report, write_stream
from ..cli_options import state_dir_option
from ..errors import EXIT_USAGE, EvalfarmError, SpecError, UsageError
from ..redact import redact
from ..registry import resolve_ref
from ..report import SCHEMA as REPORT_SCHEMA
from ..sourcemap import dotted, line_for, load_yaml, read_text
from ..spec import EvalSpec, load_spec

__all__ = ["atomic_write", "load_report", "write_stream", "state_dir_option", "EXIT_USAGE", "EvalfarmError",
           "SpecError", "UsageError", "redact", "resolve_ref", "REPORT_SCHEMA", "dotted", "line_for",
           "load_yaml", "read_text", "EvalSpec", "load_spec"]
