"""Coding-agent drivers (claude, codex, gemini, aider, opencode, any command), the runner that
executes one in a worktree with a private HOME, and that worktree sandbox.

    driver = get_driver("claude")
    binary, version = resolve(driver)
    with sandbox(repo, "main") as box:
        run = run_agent(driver, AgentRequest(prompt, model, base_url), box.worktree, box.scratch,
                        binary=binary, timeout_s=1800)
"""
from .base import AgentRequest, AgentUsage, Driver, Invocation, Price, Scratch
from .detect import agents_dir, detect, install_hint, require
from .errors import AgentNotInstalled, AgentOutputError, AgentSetupError, SandboxError
from .registry import AGENTS, get_driver, resolve
from .runner import AgentRun, run_agent
from .sandbox import Sandbox, prune_stale, sandbox

__all__ = ["AGENTS", "AgentNotInstalled", "AgentOutputError", "AgentRequest", "AgentRun", "AgentSetupError",
           "AgentUsage", "Driver", "Invocation", "Price", "Sandbox", "SandboxError", "Scratch", "agents_dir",
           "detect", "get_driver", "install_hint", "prune_stale", "require", "resolve", "run_agent", "sandbox"]
