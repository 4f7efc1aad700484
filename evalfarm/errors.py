"""Errors a user can cause, and the exit codes the CLI maps them to.

Every user-facing error renders as one line: ``file:line: field: what is wrong``.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a gate or threshold failed
EXIT_USAGE = 2  # bad usage or input
EXIT_NOTHING_MEASURED = 3  # every item errored: a configuration problem, never a quality result
EXIT_INTERNAL = 4  # evalfarm itself failed, or the audit chain could not be appended
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C: what finished is saved as a partial report


class EvalfarmError(Exception):
    """Base class for errors that end a command with a one-line message."""

    exit_code = EXIT_USAGE


class SpecError(EvalfarmError):
    """Bad spec, dataset or case file; names the file, line and field."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class UsageError(EvalfarmError):
    """Bad CLI arguments or a reference (run id, path) that does not resolve."""


class Interrupted(EvalfarmError):
    """Ctrl-C where a partial result means nothing, or where the work goes on elsewhere: the line says which."""

    exit_code = EXIT_INTERRUPTED


class FarmError(EvalfarmError):
    """The farm could not be reached or a run could not be found in it."""

    exit_code = EXIT_USAGE


class InfrastructureError(EvalfarmError):
    """The run store, the broker or a fleet limiter failed: not an answer from the provider, so it
    never becomes an item's outcome; the item stays unfinished and is retried or redelivered."""

    exit_code = 4
