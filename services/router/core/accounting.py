"""The run's ledger: the usage and cost of each generation, added once, at the prices of
`CoreConfig.prices`.

Usage is recorded once per generation, from the final message's usage (streaming reports
cumulative usage; summing per-event figures would count tokens many times), plus the
tokens memory spent on the step (its summaries, `extra_usage`, at the memory model's
price). An external agent's step counts its own model calls as turns and reports its
own cost. A model with no known price makes the cost unknown (null), never a made-up 0.
The limits on what was spent are budget.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwire.shared.contract.envelopes import GenerationResult, Usage
from loopwire.shared.contract.event_fields import BudgetWarningFields, WarningFields
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.runtime.pricing import is_offline_model, price_of

from . import tenant_quotas
from .budget import warnings_due
from .config import CoreConfig
from .transition import Transition


@dataclass(frozen=True)
class Ledgered:
    """What the turn's events need of what the ledger just added."""

    input_tokens: int
    output_tokens: int
    budget_warnings: list[BudgetWarningFields] = field(default_factory=list)
    """`budget.warning` fields for each limit the run crossed now (budget.warnings_due)."""


def account(tx: Transition, run: RunState, result: GenerationResult, *, cfg: CoreConfig) -> Ledgered | None:
    """A generation's result in the ledger: the tokens memory spent on the step besides
    the model call (its summaries), whether the call succeeded or not; and for a completed
    generation one more turn and its usage. None for a failed generation."""
    if result.extra_usage is not None:
        extra = result.extra_usage
        _add_usage(tx, run, extra, input_tokens=extra.total_input(), count="extra_usage", cfg=cfg,
                   model=result.extra_model or result.model)
    if not result.ok or result.message is None:
        return None
    # An external agent's step holds all its own model calls (result.turns).
    run.turn += max(1, result.turns)
    tx.st.turns += max(1, result.turns)
    usage = result.usage
    input_tokens = usage.total_input()
    run.budget.last_context_tokens = input_tokens + usage.output_tokens
    _add_usage(tx, run, usage, input_tokens=input_tokens, count="turn", cfg=cfg, model=result.model,
               reported_cost=result.cost_usd)
    return Ledgered(input_tokens=input_tokens, output_tokens=usage.output_tokens,
                    budget_warnings=warnings_due(run, cfg.budget_warning_pct))


def _add_usage(tx: Transition, run: RunState, usage: Usage, *, input_tokens: int, count: str, cfg: CoreConfig,
               model: str | None, reported_cost: float | None = None) -> None:
    """Add `usage` to the run's and the session's ledger (with its cost, at `model`'s price,
    by default the run's current model's, or as an external agent reported it) and count it."""
    run.budget.usage, tx.st.usage = usage.add_to(run.budget.usage, tx.st.usage)
    model = model or run.config.models[run.limits.model_offset]
    cost = reported_cost if reported_cost is not None else price_of(model, usage, cfg.prices)
    if cost is None:
        _unpriced(tx, run, model, cfg=cfg)
    else:
        run.budget.cost_usd += cost
        tx.st.cost_usd += cost
    if cfg.tenant_limits is not None:
        tenant_quotas.note_usage(tx, run, tokens=input_tokens + usage.output_tokens, cost=cost, cfg=cfg)
    tx.count(count, {"profile": run.config.profile, "model": model},
             input_tokens=input_tokens, output_tokens=usage.output_tokens, cost_usd=cost or 0.0,
             cache_read=usage.cache_read_input_tokens, cache_write=usage.cache_creation_input_tokens)


def _unpriced(tx: Transition, run: RunState, model: str, *, cfg: CoreConfig) -> None:
    """A model with no known price makes the run's cost unknown (null, not a made-up 0);
    the first time per run and model a `warning` says so (loopwire's own offline models
    have no price by design and need no warning)."""
    tx.st.cost_unknown = True
    if model in run.budget.unpriced:
        return
    run.budget.unpriced.append(model)
    if not is_offline_model(model):
        tx.emit("warning", f"warning:{run.run_id}:unknown_price:{model}", run.run_id, WarningFields(code="unknown_price",
                message=f"no price is known for model {model}: the run's cost_usd is null "
                        "(LOOPWIRE_PRICES can give it one)"))
        tenant_quotas.warn_unpriced(tx, run, model, cfg=cfg)
