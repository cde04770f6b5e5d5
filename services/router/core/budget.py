"""The run's token ledger and its budgets.

The ledger (`accounting.account`) adds each generation's usage once, from the final usage the
llm service reports for the whole call: streaming reports cumulative usage, so summing the
per-event figures would count the same tokens many times. Tokens are input (cache reads
and writes included) plus output, summed over every call of the run; cost is at the prices
of `CoreConfig.prices` (shared/runtime/pricing.py's table, LOOPWIRE_PRICES on top).

Limits come from StartRun `limits`: `max_total_tokens`, `max_cost_usd` (and `max_turns`,
tool_batches.py's limits). What this module decides:

- a start with `max_cost_usd` and a model without a price is refused (`unpriced_model`):
  a cap that cannot be counted is never silently off;
- a `budget.warning` event (loopwire's addition, docs/protocol.md) once per limit, when the run has
  used `budget_warning_pct` (80%) of it;
- each call's `max_tokens` shrinks to what the token budget has left after the context the
  call will re-read (the previous call's input + output, a lower bound for the next);
- exhaustion: the used share reached the limit, or fewer than `MIN_GENERATION_TOKENS` are
  left for an answer. The run then converges: ONE last generation without tools and with a
  note asking for the best answer now (max_tokens `FINAL_ANSWER_MAX_TOKENS` at most: the
  last answer may overrun the budget by that much, which is the price of never ending
  with a bare error), and `run.ended` `budget_exhausted` with that answer;
- the end a budget caused (`end_cause`): a run whose answer would end it `completed`
  ends `budget_exhausted` instead when the budget is used up (spent >= the limit), or when
  its last generation was cut (`stop_reason: max_tokens`) at a `max_tokens` the budget's
  headroom had shrunk: the run stopped because of the budget, whatever the model meant.
  A run never reports `completed` over its budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loopwire.shared.contract.event_fields import BudgetLimit, BudgetWarningFields
from loopwire.shared.contract.run_state import RunConfig, RunState
from loopwire.shared.runtime.pricing import price_for

MIN_GENERATION_TOKENS = 64
"""Fewer tokens left than this for an answer: the budget is exhausted."""
FINAL_ANSWER_MAX_TOKENS = 1024

FINAL_ANSWER_NOTE = ("The run's budget is exhausted: this is your last reply and no tools are available. "
                     "Give your best final answer now, from what you already know.")


UNPRICED_MODEL = "unpriced_model"


def unpriced_model(config: RunConfig, prices: Mapping[str, Mapping[str, float]], *,
                   agent_reports_cost: bool = False) -> str | None:
    """With a `max_cost_usd`, the first model the run may call (its primary and fallbacks,
    its lightweight and memory models) that has no price in `prices`: its calls would add
    nothing to the cost, so the cap could not stop the run. The start is refused instead.
    An external executor's run counts the cost its agent reports (executor_profiles.py),
    whatever the model's name: its cap is counted, so nothing is refused."""
    if config.max_cost_usd is None or agent_reports_cost:
        return None
    models = [*config.models, config.lightweight_model, config.memory_model]
    return next((m for m in models if m and price_for(m, prices) is None), None)


def tokens_used(run: RunState) -> int:
    return run.budget.usage.total_input() + run.budget.usage.output_tokens


def token_headroom(run: RunState) -> int | None:
    """Tokens the next call may generate within `max_total_tokens` (None: no limit)."""
    limit = run.config.max_total_tokens
    if limit is None:
        return None
    return limit - tokens_used(run) - run.budget.last_context_tokens


def exhausted(run: RunState) -> str | None:
    """The limit that is exhausted (`max_total_tokens`, `max_cost_usd`), or None."""
    cfg = run.config
    if cfg.max_total_tokens is not None:
        headroom = token_headroom(run)
        if tokens_used(run) >= cfg.max_total_tokens or (headroom is not None and headroom < MIN_GENERATION_TOKENS):
            return "max_total_tokens"
    if cfg.max_cost_usd is not None and run.budget.cost_usd >= cfg.max_cost_usd:
        return "max_cost_usd"
    return None


def max_tokens_for(run: RunState, requested: int) -> int:
    """`max_tokens` of the next call: the run's setting, shrunk to the token headroom."""
    if run.limits.converging is not None:
        return max(1, min(requested, FINAL_ANSWER_MAX_TOKENS))
    headroom = token_headroom(run)
    if headroom is None:
        return requested
    return max(1, min(requested, max(headroom, MIN_GENERATION_TOKENS)))


@dataclass(frozen=True)
class GenerationBudget:
    """What the budget makes of the run's next generation (`next_generation`)."""

    converges_now: bool
    """A limit was exhausted now: this generation is the run's converging one."""
    max_tokens: int


def next_generation(run: RunState, requested: int, *, spent_elsewhere: str | None = None) -> GenerationBudget:
    """The budget of the run's next generation, in one step: a run whose limit is
    exhausted (or `spent_elsewhere`: its tenant's day, tenant_quotas.py) converges now;
    the call's `max_tokens` is `requested` within the token headroom, and
    `run.budget.capped` says whether the budget shrank it (cut short at it, the run ends
    `budget_exhausted`: `end_cause`)."""
    converges_now = False
    if run.limits.converging is None:
        limit = exhausted(run) or spent_elsewhere
        if limit is not None:
            run.limits.converging, run.limits.converge_reason = "budget_exhausted", limit
            converges_now = True
    max_tokens = max_tokens_for(run, requested)
    run.budget.capped = run.limits.converging is None and max_tokens < requested
    return GenerationBudget(converges_now=converges_now, max_tokens=max_tokens)


def used_up(run: RunState) -> str | None:
    """The limit the run has spent entirely (`max_total_tokens`, `max_cost_usd`), or None.
    Unlike `exhausted`, a headroom too small for another answer does not count: the run
    may still end within its budget."""
    cfg = run.config
    if cfg.max_total_tokens is not None and tokens_used(run) >= cfg.max_total_tokens:
        return "max_total_tokens"
    if cfg.max_cost_usd is not None and run.budget.cost_usd >= cfg.max_cost_usd:
        return "max_cost_usd"
    return None


def end_cause(run: RunState, stop_reason: str | None) -> str | None:
    """The limit that caused the end of a run whose latest generation would end it: the
    budget is used up, or the generation was cut at a `max_tokens` the token budget had
    shrunk. None: the run ends on its own terms."""
    spent = used_up(run)
    if spent is not None:
        return spent
    if stop_reason == "max_tokens" and run.budget.capped:
        return "max_total_tokens"
    return None


def warnings_due(run: RunState, pct: float) -> list[BudgetWarningFields]:
    """`budget.warning` fields for each limit that crossed `pct` and was not warned yet."""
    cfg = run.config
    due: list[BudgetWarningFields] = []
    limits: tuple[tuple[BudgetLimit, float | None], ...] = (("max_total_tokens", cfg.max_total_tokens),
                                                            ("max_cost_usd", cfg.max_cost_usd))
    for limit, maximum in limits:
        if maximum is None or limit in run.budget.warned:
            continue  # a limit not set is not measured (as in `exhausted`)
        used = tokens_used(run) if limit == "max_total_tokens" else round(run.budget.cost_usd, 8)
        if used < pct * maximum:
            continue
        due.append({"limit": limit, "used": used, "max": maximum, "pct": round(used / maximum, 4)})
    return due
