"""Every evalfarm internal the interop package uses, imported in one place.

The package is being reorganised (issue 9); when modules move, only these imports change.
"""
from __future__ import annotations

from ..artifacts import atomic_write, load_report, write_stream
from ..cli_options import state_dir_option
from ..errors import EvalfarmError, SpecError, UsageError
from ..registry import resolve_ref
from ..sourcemap import dotted, line_for, load_yaml, read_text
from ..spec import load_spec

__all__ = ["atomic_write", "load_report", "write_stream", "state_dir_option", "EvalfarmError", "SpecError",
           "UsageError", "resolve_ref", "dotted", "line_for", "load_yaml", "read_text", "load_spec"]
