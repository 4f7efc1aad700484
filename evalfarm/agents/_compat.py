"""The only door from evalfarm/agents/ into the rest of evalfarm: after the package moves, only these
imports change."""
from ..errors import EvalfarmError, UsageError
from ..redact import redact

__all__ = ["EvalfarmError", "UsageError", "redact"]
