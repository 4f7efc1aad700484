"""Spend budgets: what a run will cost before anything is sent, and the guard that stops sending.

An overnight run must not become a morning bill. ``estimate`` prices a plan from its
prompts before anything is queued (tokens without a tokenizer: characters / 4; replies
at ``max_tokens`` or ``DEFAULT_OUTPUT_TOKENS``; one judge call per item). A ``SpendGuard``
is the run's spend counter (model + judge): the engine asks it before every call and
charges it after; once the spend reaches the budget, nothing more is sent and the items
not yet called are recorded as ``skipped: budget``. ``LocalSpend`` counts in this process;
the farm's guard counts in Redis for every worker (``backends/celery/budget.py``).

Adapters and judges without a price cannot be estimated ("cost unknown") and their
spend is counted as 0; a budgeted run refuses them unless forced.
"""
from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol

from ..spec.models import BATCH_PROVIDERS, AdapterSpec, EvalSpec, Price, PromptSpec
from .judges import judging_messages

CHARS_PER_TOKEN = 4  # a tokenizer-free estimate: English text averages ~4 characters per token
# An agent task is not one request: the agent sends its own system prompt and tool definitions with
# every model request (its context), the task, and the history so far (each turn adds its reply and a
# tool result). Per agent item: input = turns x (context + task) + growth x turns x (turns - 1) / 2,
# output = turns x max_tokens. ``params: {max_turns: N, max_tokens: M}`` on the adapter states them;
# otherwise these defaults. The contexts are the first request of the pinned CLIs as measured against
# mock-provider (bench/agent_context.py, characters / 4: Claude Code 2.1.197 sends 117,489 characters,
# Codex 0.171.0 39,675); other agents get the default. An upper bound: a provider's prompt cache
# makes the repeated context cheaper than this prices it.
DEFAULT_AGENT_TURNS = 10
AGENT_TURN_GROWTH_TOKENS = 1000  # a turn's reply and tool result, added to every later request
AGENT_CONTEXT_TOKENS = {"claude": 29_400, "codex": 9_900}
DEFAULT_AGENT_CONTEXT_TOKENS = 10_000
DEFAULT_OUTPUT_TOKENS = 512  # a reply's tokens when the adapter sets no max_tokens
DEFAULT_JUDGE_OUTPUT_TOKENS = 256  # a verdict's tokens when the judge sets no max_tokens
FREE_ADAPTERS = ("mock",)  # built-ins that never bill
NUSD = 1_000_000_000  # spend is counted in integer nano-dollars (exact sums)
SKIPPED_BUDGET = "budget"  # Outcome.skipped: the budget was reached before this item's call was sent


class BudgetExhausted(Exception):
    """The run's spend reached its budget before this call was sent: not a provider failure and
    not a quality verdict; the item is recorded as skipped."""


class SpendGuard(Protocol):
    limit_usd: float

    async def exhausted(self) -> bool:
        """True once the run's spend (every process) has reached the budget."""

    async def charge(self, usd: float) -> None:
        """Add a finished call's cost to the run's spend."""


class LocalSpend:
    """The spend counter of a run in this process (the in-process backend), in nano-dollars like the
    farm's: a sum of floats could stop one call late (20 x 0.2 < 4.0)."""

    def __init__(self, limit_usd: float) -> None:
        self.limit_usd = float(limit_usd)
        self.limit_nusd = int(round(self.limit_usd * NUSD))
        self.spent_nusd = 0

    async def exhausted(self) -> bool:
        return self.spent_nusd >= self.limit_nusd

    async def charge(self, usd: float) -> None:
        self.spent_nusd += max(0, int(round(usd * NUSD)))


_GUARD: ContextVar[SpendGuard | None] = ContextVar("evalfarm_spend_guard", default=None)


@contextlib.contextmanager
def guarding(guard: SpendGuard | None) -> Iterator[None]:
    """Calls made inside (by this task) ask ``guard`` before every request they send, retries
    included: a retry after the budget was reached is a new request, and is not sent."""
    token = _GUARD.set(guard)
    try:
        yield
    finally:
        _GUARD.reset(token)


async def before_send() -> None:
    """Raise ``BudgetExhausted`` when the current call's run has no budget left (providers call
    this right before each HTTP request)."""
    guard = _GUARD.get()
    if guard is not None and await guard.exhausted():
        raise BudgetExhausted(f"the run's budget of ${guard.limit_usd:g} is spent")


# -- the estimate ------------------------------------------------------------------------------------

def tokens(text: str | None) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def max_tokens(params: Mapping[str, Any] | None, default: int) -> int:
    for key in ("max_tokens", "max_completion_tokens"):
        value = (params or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def _cost(price: Price, t_in: int, t_out: int) -> float:
    return (t_in * price.input + t_out * price.output) / 1_000_000


def adapter_price(entry: "str | AdapterSpec", overrides: Mapping[str, Price] | None = None) -> Price | None:
    """An adapter's price per million tokens; None when unknown (a plug-in or an endpoint without
    ``price``). The built-in ``mock`` adapters are free."""
    adapter_id = entry if isinstance(entry, str) else entry.id
    if overrides and adapter_id in overrides:
        return overrides[adapter_id]
    if isinstance(entry, AdapterSpec):
        return entry.price
    return Price(input=0, output=0) if entry.split(":", 1)[0] in FREE_ADAPTERS else None


def judge_price(spec: EvalSpec) -> Price | None:
    if spec.judge is None or spec.judge.provider == "mock":
        return Price(input=0, output=0)
    return spec.judge.price


@dataclass
class Estimate:
    """What a run will cost, before anything is sent (an upper bound per reply: max_tokens)."""

    items: int = 0
    judge_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    model_usd: float = 0.0
    judge_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)  # adapter ids (and "judge") with no price
    agent_items: int = 0  # items that spawn a coding agent (estimated per task: see AGENT_CONTEXT_TOKENS)
    agent_turns: int = 0  # the largest turns per task assumed
    live_usd: float = 0.0  # the same run with every call live
    batch_usd: float = 0.0  # the same run with every call that can go through a batch API batched
    batched: list[str] = field(default_factory=list)  # adapter ids (and "judge") this run sends in batches

    @property
    def total_usd(self) -> float:
        return self.model_usd + self.judge_usd

    @property
    def known(self) -> bool:
        return not self.unpriced

    def figures(self) -> str:
        """'≈ $X (model $Y, judge $Z)', the part every message about the estimate repeats."""
        return f"≈ {usd(self.total_usd)} (model {usd(self.model_usd)}, judge {usd(self.judge_usd)})"

    def line(self) -> str:
        """The one line printed before a run starts."""
        detail = (f"{self.items:,} items, ~{self.input_tokens:,} tokens in, {self.output_tokens:,} out "
                  f"(max_tokens, else {DEFAULT_OUTPUT_TOKENS} per reply)")
        if self.agent_items:
            detail += (f"; {self.agent_items:,} of them agent tasks, each ~{self.agent_turns} model requests carrying the "
                       f"agent's context and history (params.max_turns, else {DEFAULT_AGENT_TURNS})")
        if self.judge_calls:
            detail += f", {self.judge_calls:,} judge calls (~{self.judge_input_tokens + self.judge_output_tokens:,} tokens)"
        text = f"estimated cost {self.figures()}: {detail}"
        if self.unpriced:
            text += f"; cost unknown for {', '.join(self.unpriced)} (no price)"
        if self.batched or self.batch_usd < self.live_usd:
            text += (f"; live calls {usd(self.live_usd)}, through batch APIs {usd(self.batch_usd)}"
                     + (f" (this run batches {', '.join(self.batched)})" if self.batched else ""))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "judge_calls": self.judge_calls, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "judge_input_tokens": self.judge_input_tokens,
                "judge_output_tokens": self.judge_output_tokens, "model_usd": round(self.model_usd, 8),
                "judge_usd": round(self.judge_usd, 8), "total_usd": round(self.total_usd, 8),
                "unpriced": list(self.unpriced), "live_usd": round(self.live_usd, 8),
                "batch_usd": round(self.batch_usd, 8), "batched": list(self.batched)}


def usd(value: float) -> str:
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}" if value >= 0.0001 or value == 0 else f"${value:.6f}"


def estimate(spec: EvalSpec, prompts: Iterable[PromptSpec], trials: int | None = None,
             prices: Mapping[str, Price] | None = None) -> Estimate:
    """Price a run from its prompts as they will be sent (one pass: a streamed dataset is not held).
    ``prices`` overrides adapters' prices by id (the A/B harness knows its executors' prices)."""
    n_trials = trials or spec.trials
    est = Estimate()
    adapters = []
    for entry in spec.adapters:
        price = adapter_price(entry, prices)
        adapter_id = entry if isinstance(entry, str) else entry.id
        if price is None:
            est.unpriced.append(adapter_id)
        params = entry.params if isinstance(entry, AdapterSpec) else None
        agent = agent_shape(entry) if isinstance(entry, AdapterSpec) and entry.is_agent else None
        can_batch = isinstance(entry, AdapterSpec) and entry.provider in BATCH_PROVIDERS and price is not None
        batched = bool(isinstance(entry, AdapterSpec) and entry.batch)
        if batched:
            est.batched.append(adapter_id)
        adapters.append((price, max_tokens(params, DEFAULT_OUTPUT_TOKENS), agent,
                         price.batched() if can_batch else price, batched))
    jprice = judge_price(spec)
    if jprice is None:
        est.unpriced.append("judge")
    j_batch = jprice.batched() if jprice is not None and spec.judge is not None and spec.judge.provider in BATCH_PROVIDERS else jprice
    j_batched = bool(spec.judge is not None and spec.judge.batch)
    if j_batched:
        est.batched.append("judge")
    judge_out = max_tokens(spec.judge.params, DEFAULT_JUDGE_OUTPUT_TOKENS) if spec.judge else 0
    for prompt in prompts:
        t_in = tokens(prompt.system) + tokens(prompt.text)
        for price, t_out, agent, bprice, batched in adapters:
            i_in, i_out = t_in, t_out
            if agent is not None:  # a coding agent: many requests per task, each with its context and history
                turns, context = agent
                est.agent_items += n_trials
                est.agent_turns = max(est.agent_turns, turns)
                i_in = turns * (context + t_in) + AGENT_TURN_GROWTH_TOKENS * turns * (turns - 1) // 2
                i_out = turns * t_out
            est.items += n_trials
            est.input_tokens += i_in * n_trials
            est.output_tokens += i_out * n_trials
            if price is not None:
                live, as_batch = _cost(price, i_in, i_out) * n_trials, _cost(bprice, i_in, i_out) * n_trials
                est.model_usd += as_batch if batched else live
                est.live_usd += live
                est.batch_usd += as_batch
            if spec.judge is None:
                continue
            # the judging prompt as the judge will see it, with a reply of the estimated length
            j_in = sum(tokens(m["content"]) for m in judging_messages(spec.judge, prompt, "x" * (t_out * CHARS_PER_TOKEN)))
            est.judge_calls += n_trials
            est.judge_input_tokens += j_in * n_trials
            est.judge_output_tokens += judge_out * n_trials
            if jprice is not None:
                live, as_batch = _cost(jprice, j_in, judge_out) * n_trials, _cost(j_batch, j_in, judge_out) * n_trials
                est.judge_usd += as_batch if j_batched else live
                est.live_usd += live
                est.batch_usd += as_batch
    return est


def agent_shape(entry: AdapterSpec) -> tuple[int, int]:
    """(turns, context tokens per request) assumed for one task of an agent adapter: its stated
    ``params.max_turns``, else ``DEFAULT_AGENT_TURNS``; the agent's measured context."""
    turns = entry.params.get("max_turns")
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        turns = DEFAULT_AGENT_TURNS
    return turns, AGENT_CONTEXT_TOKENS.get(entry.agent or "", DEFAULT_AGENT_CONTEXT_TOKENS)


def budget_problem(est: Estimate, budget_usd: float, flag: str) -> str | None:
    """Why a run with this estimate must not start under ``budget_usd`` (unless forced), else None."""
    if est.unpriced:
        return (f"{flag} ${budget_usd:g} cannot limit {', '.join(est.unpriced)}: no price, so its spend would "
                f"count as $0 (set price: {{input: USD, output: USD}} per million tokens); pass --force to run "
                "with that spend uncounted")
    if est.total_usd > budget_usd:
        return (f"estimated cost {est.figures()} exceeds the budget ${budget_usd:g} ({flag}); nothing was sent: "
                "raise the budget, or pass --force to start anyway (the run then stops when the spend reaches "
                "the budget)")
    return None

