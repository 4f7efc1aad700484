"""Every evalfarm internal the interop package uses, imported in one place.

When modules move, only these imports change.
"""
from __future__ import annotations

from ..ci.artifacts import atomic_write, load_report, write_stream
from ..ci.registry import resolve_ref
from ..cli.options import state_dir_option
from ..errors import EvalfarmError, SpecError, UsageError
from ..spec.load import load_spec, open_spec
from ..spec.sourcemap import dotted, line_for, load_yaml, read_text

__all__ = ["atomic_write", "load_report", "write_stream", "state_dir_option", "EvalfarmError", "SpecError",
           "UsageError", "resolve_ref", "dotted", "line_for", "load_yaml", "read_text", "load_spec",
           "open_spec"]
