"""What can go wrong around an agent run. A user-facing setup problem (agent not installed, key
missing) is a one-line UsageError (exit 2); everything that happens once the agent runs (it exits
non-zero, times out, prints something we cannot read) is a runtime error of that run, never a
quality failure."""
from __future__ import annotations

from ..errors import UsageError


class AgentNotInstalled(UsageError):
    """The agent's CLI is not where `make agents` puts it nor on PATH; the message says what to run."""


class AgentSetupError(UsageError):
    """The run cannot be set up as asked (missing key variable, bad command template)."""


class AgentOutputError(Exception):
    """The agent's machine-readable output is missing, truncated or not what its driver expects."""


class SandboxError(UsageError):
    """git could not create the worktree (no such repo, unknown base); git's reason on one line."""
