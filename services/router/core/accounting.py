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

from loopwire.shared.contract.envelopes import GenerationResult, Usage
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.runtime.pricing import cost_at, is_offline_model, price_for

from . import tenant_quotas
from .config import CoreConfig
from .transition import Transition


def account(tx: Transition, run: RunState, result: GenerationResult, cfg: CoreConfig) -> None:
    """A completed generation: one more turn, and its usage in the ledger."""
    # An external agent's step holds all its own model calls (result.turns).
    run.turn += max(1, result.turns)
    tx.st.turns += max(1, result.turns)
    run.last_context_tokens = result.usage.total_input() + result.usage.output_tokens
    add_usage(tx, run, result, result.usage, "turn", cfg, reported_cost=result.cost_usd)


def account_extra(tx: Transition, run: RunState, result: GenerationResult, cfg: CoreConfig) -> None:
    """Tokens memory spent on this step besides the model call (its summaries), reported
    once with the step's result, whether the call succeeded or not."""
    if result.extra_usage is not None:
        add_usage(tx, run, result, result.extra_usage, "extra_usage", cfg, model=result.extra_model)


def add_usage(tx: Transition, run: RunState, result: GenerationResult, usage: Usage, count: str,
              cfg: CoreConfig, model: str | None = None, reported_cost: float | None = None) -> None:
    """Add `usage` to the run's and the session's ledger (with its cost, at `model`'s price,
    by default the generation's, or as an external agent reported it) and count it."""
    run.usage = run.usage + usage
    tx.st.usage = tx.st.usage + usage
    model = model or result.model or run.config.models[run.model_offset]
    if reported_cost is not None:
        cost: float | None = reported_cost
    else:
        price = price_for(model, cfg.prices)
        cost = None if price is None else cost_at(price, usage)
    if cost is None:
        _unpriced(tx, run, model, cfg)
    else:
        run.cost_usd += cost
        tx.st.cost_usd += cost
    tenant_quotas.note_usage(tx, run, usage.total_input() + usage.output_tokens, cost, cfg)
    tx.count(count, {"profile": run.config.profile, "model": model},
             input_tokens=usage.total_input(), output_tokens=usage.output_tokens, cost_usd=cost or 0.0)


def _unpriced(tx: Transition, run: RunState, model: str, cfg: CoreConfig) -> None:
    """A model with no known price makes the run's cost unknown (null, not a made-up 0);
    the first time per run and model a `warning` says so (loopwire's own offline models
    have no price by design and need no warning)."""
    tx.st.cost_unknown = True
    if model in run.unpriced:
        return
    run.unpriced.append(model)
    if not is_offline_model(model):
        tx.emit("warning", f"warning:{run.run_id}:unknown_price:{model}", run.run_id, code="unknown_price",
                message=f"no price is known for model {model}: the run's cost_usd is null "
                        "(LOOPWIRE_PRICES can give it one)")
        tenant_quotas.warn_unpriced(tx, run, model, cfg)
