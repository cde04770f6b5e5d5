"""Price table per model (USD per million tokens), configurable with LOOPWIRE_PRICES.

`LOOPWIRE_PRICES='{"my-model": {"input": 1.0, "output": 5.0}}'` adds or overrides entries:
a service reads it with its settings and passes `price_table(settings.prices)` in (the
router's core gets it as `CoreConfig.prices`); nothing here reads the environment, and a
function given no table prices at the built-in one. A model id matches the longest known prefix (so dated ids such as
`claude-sonnet-4-5-20250929` find `claude-sonnet-4-5`). A model with no price has no
cost: `cost_usd` returns None (a run's `cost_usd` is then null, with a `warning` event),
never a made-up 0, and a missing price never stops a run in progress; a start with
`limits.max_cost_usd` and a model without a price is refused instead (`unpriced_model`,
services/router/core/budget.py), since its cap could not be counted. loopwire's own offline models
(`loopwire-demo`, `loopwire-scripted`, `loopwire-bench`) have no price by design.

tests/unit/router/test_pricing.py checks that the table covers every model the docs name and agrees
with the `genai-prices` package (a maintained price list) on them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from loopwire.shared.contract.envelopes import Usage

__all__ = ["DEFAULT_PRICES", "cost_at", "cost_usd", "is_offline_model", "log", "price_for", "price_of",
           "price_table"]

log = logging.getLogger("loopwire.pricing")

DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "claude-opus-4": {"input": 15.0, "output": 75.0, "cache_read": 1.5, "cache_write": 18.75},
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_write": 6.25},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
    "claude-haiku-4": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0, "cache_read": 0.08, "cache_write": 1.0},
}

OFFLINE_MODEL_PREFIX = "loopwire-"
"""Model ids of loopwire's own offline models (services/llm: scripted_model.py,
demo_model.py, bench_model.py)."""

_warned: set[str] = set()


def is_offline_model(model: str) -> bool:
    return model.startswith(OFFLINE_MODEL_PREFIX)


def price_table(overrides: Mapping[str, Mapping[str, float]]) -> dict[str, Mapping[str, float]]:
    """The built-in prices with `overrides` on top: a deployment's LOOPWIRE_PRICES, as its
    settings read it (a malformed value stops the process at start-up, when the settings
    are read, not at a run's first cost)."""
    return {**DEFAULT_PRICES, **overrides}


def price_for(model: str, table: Mapping[str, Mapping[str, float]] | None = None) -> Mapping[str, float] | None:
    """`model`'s entry in `table` (by default the built-in prices), by longest prefix."""
    table = table if table is not None else DEFAULT_PRICES
    best = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best else None


def price_of(model: str, usage: Usage, table: Mapping[str, Mapping[str, float]] | None) -> float | None:
    """The cost of `usage` at `model`'s price in `table`, or None when the model has none."""
    price = price_for(model, table)
    return None if price is None else cost_at(price, usage)


def cost_usd(model: str, usage: Usage, table: Mapping[str, Mapping[str, float]] | None = None) -> float | None:
    """The cost of `usage` at `model`'s price, or None when the model has no known price
    (logged once per model)."""
    cost = price_of(model, usage, table)
    if cost is None and model not in _warned and not is_offline_model(model):
        _warned.add(model)
        log.warning("no price for model %s: its cost is unknown (cost_usd null)", model)
    return cost


def cost_at(price: Mapping[str, float], usage: Usage) -> float:
    """The cost of `usage` at `price` (one entry of the table)."""
    cost = (usage.input_tokens * price.get("input", 0.0)
            + usage.output_tokens * price.get("output", 0.0)
            + usage.cache_read_input_tokens * price.get("cache_read", price.get("input", 0.0))
            + usage.cache_creation_input_tokens * price.get("cache_write", price.get("input", 0.0)))
    return cost / 1_000_000
