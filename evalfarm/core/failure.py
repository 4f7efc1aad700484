"""Failure classes of agent items (spawn mode), decided once: who is to blame for an item's result.

``passed``; ``agent_failed`` (the agent finished, or exited non-zero, and the check failed);
``agent_timeout`` (the agent used its whole time budget; not when, sealed, the relay saw its last model
call wait unanswered for half of it or more: the endpoint hung, infra_failed); ``verifier_failed`` (the check itself
could not run: its program is missing (exit 126/127) or it hit its own timeout); ``infra_failed``
(the sandbox or worktree could not be made or its `setup` failed, the agent CLI did not start (exit 126/127, not found),
the model endpoint answered 5xx or 429 or could not be reached: by the relay's record when the task ran
sealed, else by the agent's own words; the worker died); ``budget_stopped`` (the
run's budget ran out before the item was sent).

Only ``passed``, ``agent_failed`` and ``agent_timeout`` are measured: they are in every pass rate's
denominator. ``infra_failed`` and ``verifier_failed`` are unmeasured (not the agent's doing), shown
apart with their reasons and reported as coverage beside the score; an ``infra_failed`` task is run
again ``infra_retries()`` times before it stays so (in process by the agent adapter; on the farm on
another live spawn worker when there is one: executors/celery/spawn.py). Pure functions over outcome dicts.
"""
from __future__ import annotations

import os
import re
from typing import Any

PASSED, AGENT_FAILED, AGENT_TIMEOUT = "passed", "agent_failed", "agent_timeout"
VERIFIER_FAILED, INFRA_FAILED, BUDGET_STOPPED = "verifier_failed", "infra_failed", "budget_stopped"
CLASSES = (PASSED, AGENT_FAILED, AGENT_TIMEOUT, VERIFIER_FAILED, INFRA_FAILED, BUDGET_STOPPED)
MEASURED = (PASSED, AGENT_FAILED, AGENT_TIMEOUT)  # in the pass rate's denominator
UNMEASURED = (VERIFIER_FAILED, INFRA_FAILED, BUDGET_STOPPED)

INFRA_RETRIES = 2  # default re-runs of an infra_failed agent task (EVALFARM_AGENT_INFRA_RETRIES)
INFRA_HEADLINE_SHARE = 0.2  # a run with more than this share of infra failures says so first
COVERAGE_MARGIN = 0.1  # an A/B comparison names no winner when the arms' coverage differs by more

# errors that are the host's, not the agent's: the sandbox, the process start, the run store
_INFRA_ERRORS = {"AgentSetupError", "SandboxError", "FileNotFoundError", "PermissionError", "OSError",
                 "BlockingIOError", "InfrastructureError", "WorkerLostError", "WorkerDied", "ConnectionError"}
# an agent's account of a model endpoint that failed (Claude Code "API Error: 503", codex "unexpected
# status 502", a connection refused), and of a CLI that could not start ("exit code 127", "not found")
_ENDPOINT_TEXT = re.compile(
    r"\b(?:API Error|status|HTTP|error)\W{0,3}(?:5\d\d|429)\b|\b5\d\d\s+(?:Service Unavailable|Bad Gateway|"
    r"Internal Server|Gateway Timeout)|overloaded_error|rate_limit_error|Too Many Requests|"
    r"Connection (?:refused|reset|error)|ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN", re.I)
_CLI_TEXT = re.compile(r"exit code 12[67]\b|command not found|No such file or directory.*\bexec\b", re.I)


STALL_SHARE = 0.5  # a timed-out agent whose last model call waited this share of its run: the endpoint hung


def endpoint_stalled(agent: dict[str, Any]) -> bool:
    """A timed-out sealed task whose last model call was still unanswered after ``STALL_SHARE`` of the
    run's wall time (the relay's record): the endpoint hung, the agent did not use its time."""
    relay = agent.get("relay") if isinstance(agent.get("relay"), dict) else {}
    stalled, wall = relay.get("stalled_s"), agent.get("wall_s")
    return bool(agent.get("timed_out")) and isinstance(stalled, (int, float)) and isinstance(wall, (int, float)) \
        and wall > 0 and stalled >= STALL_SHARE * wall


def endpoint_failed(status: Any) -> bool:
    """A model endpoint's answer that is the endpoint's failure, not the agent's: 5xx or 429 (rate limit,
    quota). The relay's own refusals (401 wrong token, 429 over max_tokens_per_task) are never forwarded."""
    return isinstance(status, int) and (status >= 500 or status == 429)


def infra_retries() -> int:
    try:
        return max(0, int(os.environ.get("EVALFARM_AGENT_INFRA_RETRIES") or INFRA_RETRIES))
    except ValueError:
        return INFRA_RETRIES


def is_agent_item(outcome: dict[str, Any]) -> bool:
    return isinstance(outcome.get("agent"), dict) or bool(outcome.get("failure_class"))


def error_class(error_name: str, message: str, agent: dict[str, Any] | None) -> str:
    """The class of an agent task that raised: infra, the agent's timeout, or the agent's failure."""
    agent = agent or {}
    if agent.get("infra") or error_name in _INFRA_ERRORS or _CLI_TEXT.search(message or ""):
        return INFRA_FAILED
    relay = agent.get("relay")
    if isinstance(relay, dict) and "upstream_failures" in relay:
        # sealed: the relay saw every model call, so the wire decides, not the agent's words (an agent whose
        # own test printed "HTTP 503" failed the task; one whose endpoint kept failing did not)
        if relay.get("last_call_failed") or (relay.get("upstream_failures") and _ENDPOINT_TEXT.search(message or "")):
            return INFRA_FAILED
    elif _ENDPOINT_TEXT.search(message or ""):
        return INFRA_FAILED
    if agent.get("timed_out"):
        return INFRA_FAILED if endpoint_stalled(agent) else AGENT_TIMEOUT
    return AGENT_FAILED


def classify(outcome: dict[str, Any]) -> str | None:
    """An agent item's class; None for an item that is not an agent's."""
    if outcome.get("skipped"):
        return BUDGET_STOPPED if is_agent_item(outcome) else None
    if not is_agent_item(outcome):
        return None
    agent, error = outcome.get("agent") or {}, outcome.get("error")
    if error:
        if (error.get("stage") or "adapter") != "adapter":
            return INFRA_FAILED  # the judge or the store failed, not the agent
        return error_class(str(error.get("class") or ""), str(error.get("message") or ""), agent)
    check = agent.get("check") or {}
    if check and not outcome.get("passed") and (check.get("timed_out") or check.get("exit_code") in (126, 127)):
        return VERIFIER_FAILED
    return PASSED if outcome.get("passed") else AGENT_FAILED


def verdict(cls: str) -> bool | None:
    """True, False, or None (unmeasured) for a class."""
    return True if cls == PASSED else False if cls in (AGENT_FAILED, AGENT_TIMEOUT) else None


def reason(outcome: dict[str, Any]) -> str:
    """One line: why an unmeasured agent item is unmeasured."""
    error = outcome.get("error") or {}
    if error:
        return str(error.get("message") or error.get("class") or "error")[:300]
    check = (outcome.get("agent") or {}).get("check") or {}
    if check.get("timed_out"):
        return f"the check timed out after {check.get('wall_s')} s"
    for c in outcome.get("checks") or []:
        if c.get("kind") == "command" and not c.get("passed"):
            return f"the check could not run: {c.get('reason')}"[:300]
    return outcome.get("skipped") or ""


def coverage_line(fig: dict[str, Any]) -> str | None:
    """'pass rate 62% over 47 of 50 tasks; 3 infrastructure failures' for an adapter with agent items."""
    classes = fig.get("failure_classes")
    if not classes:
        return None
    total = sum(classes.values())
    measured = sum(classes.get(c, 0) for c in MEASURED)
    rate = f"{classes.get(PASSED, 0) / measured:.0%}" if measured else "not measured"
    parts = [f"pass rate {rate} over {measured} of {total} tasks"]
    for cls, words in ((INFRA_FAILED, "infrastructure failure"), (VERIFIER_FAILED, "check failure"),
                       (BUDGET_STOPPED, "stopped by the budget")):
        n = classes.get(cls, 0)
        if n:
            parts.append(f"{n} {words}{'s' if n > 1 and cls != BUDGET_STOPPED else ''}")
    return "; ".join(parts)


def infra_headline(per_adapter: dict[str, dict[str, Any]], share: float = INFRA_HEADLINE_SHARE) -> str | None:
    """The run's headline when more than ``share`` of its agent tasks failed for infrastructure."""
    total = infra = 0
    for fig in per_adapter.values():
        classes = fig.get("failure_classes") or {}
        total += sum(classes.values())
        infra += classes.get(INFRA_FAILED, 0)
    if total and infra / total > share:
        return (f"INFRASTRUCTURE FAILURES: {infra} of {total} agent tasks ({infra / total:.0%}) could not be "
                f"measured (more than {share:.0%}); the scores cover the rest only")
    return None
