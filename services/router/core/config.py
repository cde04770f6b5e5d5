"""The router core's configuration: the defaults and the loop-control knobs.

One frozen dataclass, built from the router's settings by the shell (`CoreConfig.from_settings`),
so the core itself never reads the environment and tests pass exactly what they mean. The
defaults are RouterSettings' own (documented there, and in README's configuration table), so
a core made with `CoreConfig()` behaves as a deployment with no overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.tenant_limits import TenantLimits
from loopwire.shared.runtime.lru import LruCache
from loopwire.shared.runtime.pricing import DEFAULT_PRICES, price_table
from loopwire.shared.runtime.settings import RuntimeSettings

from .settings import RouterSettings


def _default(name: str) -> Any:
    return RouterSettings.model_fields[name].default


def stall_after(settings: RuntimeSettings) -> float:
    """Seconds without progress after which a run's model or tool step counts as stalled:
    the outage tolerance, or the longest a step may take (its timeout and an ack wait)."""
    longest_step = max(settings.llm_timeout_s, settings.tool_timeout_s) + settings.ack_wait_s
    return float(max(settings.outage_tolerance_s, longest_step))


def executor_stall_after(settings: RuntimeSettings) -> float:
    """The same for a run whose steps are an external agent's turns (executor profiles)."""
    return max(stall_after(settings), settings.executor_timeout_s + settings.ack_wait_s)


@dataclass(frozen=True)
class CoreConfig:
    default_model: str = _default("default_model")
    default_max_tokens: int = _default("default_max_tokens")
    lightweight_model: str | None = _default("lightweight_model")
    """The lightweight model of an `auto` run whose StartRun names none (LOOPWIRE_LIGHTWEIGHT_MODEL)."""
    memory_model: str | None = _default("memory_model")
    """The memory's model for a run whose StartRun names none; None: the run's models."""
    max_inner_iterations: int = _default("max_inner_iterations")
    """Generations per outer iteration; 0: the profile's default."""
    max_outer_iterations: int = _default("max_outer_iterations")
    """Outer iterations per run; 0: the profile's default."""
    budget_warning_pct: float = _default("budget_warning_pct")
    loop_repeat_threshold: int = _default("loop_repeat_threshold")
    loop_text_repeats: int = _default("loop_text_repeats")
    vacuous_max_retries: int = _default("vacuous_max_retries")
    commitment_max_nudges: int = _default("commitment_max_nudges")
    context_retries: int = _default("context_retries")
    max_subagent_depth: int = _default("max_subagent_depth")
    """A child run deeper than this is refused (subagent.py)."""
    tool_policy: dict[str, str] = field(default_factory=dict)
    """LOOPWIRE_TOOL_POLICY: the floor of every run's tool permissions (tool_policy.py)."""
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    """USD per million tokens by model id prefix (shared/runtime/pricing.py): the built-in
    table, with LOOPWIRE_PRICES on top in a deployment."""

    stall_after_s: float = 0.0
    """A step result that comes when the session has not moved for longer than this ends
    the run `failed` (`undeliverable`), as the router's watchdog would have (stall_after);
    0: no limit (a core without a clock)."""
    executor_stall_after_s: float = 0.0
    """The same for the external-executor profiles (executor_stall_after)."""

    tenant_limits: TenantLimits | None = None
    """LOOPWIRE_TENANT_LIMITS (tenant_quotas.py); None: no tenant is limited or counted."""
    schema_validators: LruCache[bytes, Any] = field(default_factory=lambda: LruCache[bytes, Any](256),
                                                   compare=False, repr=False)
    """The plan gate's compiled JSON Schema validators by schema (strategy_loop.schema_problem):
    building one costs more than a check. A cache, not a setting: each CoreConfig the shell
    builds owns one and hands it in with every decision, so the core keeps no state of its
    own between decisions."""

    @classmethod
    def from_settings(cls, settings: Any) -> CoreConfig:
        names = [f for f in cls.__dataclass_fields__
                 if hasattr(settings, f) and f not in ("prices", "tenant_limits", "schema_validators")]
        # Settings' `prices` holds LOOPWIRE_PRICES alone: the core's table is the whole one.
        stalls: dict[str, Any] = {"stall_after_s": stall_after(settings),
                                  "executor_stall_after_s": executor_stall_after(settings)} \
            if isinstance(settings, RouterSettings) else {}
        return cls(**{n: getattr(settings, n) for n in names if n not in stalls}, **stalls,
                   prices=price_table(getattr(settings, "prices", {})),
                   tenant_limits=settings.limits_table() if hasattr(settings, "limits_table") else None)
