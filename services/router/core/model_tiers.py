"""Model tiers: which of the run's models does which work.

StartRun `model.selection` is `manual` (the default: every generation uses the run's
models, `primary` then `fallbacks`) or `auto`: the work a smaller model does as well runs
on `model.lightweight`. That work is declared here, once:

| work | tier | where |
|---|---|---|
| the run's generations | `primary` | memory.assemble → llm |
| plan building (agentic_planned's `plan` phase) | `lightweight` | `Profile.model_tiers` |
| compaction summaries, observations, reflections | `lightweight` | memory's own calls (`RunConfig.memory_model`) |
| progress reminders | `lightweight` | progress_injection.py builds them from the run's bookkeeping: no model call |

A phase's generations have the tier its profile declares (`Profile.model_tiers`, phase →
tier; `primary` when it declares none; `any` takes the run's models as they are). A
lightweight generation asks `model.lightweight` first and falls back to the run's own
models. `model.memory` (and, below it, the operator's LOOPWIRE_MEMORY_MODEL) stays the
explicit choice for memory's calls: with `auto` and no `model.memory`, they use the
lightweight model. Every `message` event's `model` names the model that answered.
"""

from __future__ import annotations

from loopwire.shared.contract.protocol import ModelSpec
from loopwire.shared.contract.run_state import RunState

from .profiles import ModelTier, Profile

__all__ = ["MEMORY_TIER", "ModelTier", "generation_models", "generation_tier", "lightweight_of", "memory_model"]

MEMORY_TIER: ModelTier = "lightweight"
"""Memory's own calls: compaction summaries, observations, reflections."""


def lightweight_of(spec: ModelSpec) -> str | None:
    """The model of the lightweight tier a StartRun asks for, or None (`manual`)."""
    return spec.lightweight if spec.selection == "auto" else None


def memory_model(spec: ModelSpec, operator_default: str | None) -> str | None:
    """The model of memory's calls: `model.memory`, else the lightweight model (`auto`),
    else the operator's LOOPWIRE_MEMORY_MODEL; None: the run's models."""
    return spec.memory or lightweight_of(spec) or operator_default  # memory's work is MEMORY_TIER


def generation_tier(run: RunState, profile: Profile) -> ModelTier:
    """The tier of the run's next generation, as its profile declares it for the phase."""
    if run.limits.converging is not None:
        return "primary"  # the last answer of a run out of budget or in a loop
    return profile.model_tiers.get(run.profile_phase, "primary")


def generation_models(run: RunState, profile: Profile) -> list[str]:
    """The models of the run's next generation (of profile `profile`, the run's), in the
    order they are tried."""
    models = run.config.models[run.limits.model_offset:]
    light = run.config.lightweight_model
    if light is None or generation_tier(run, profile) != "lightweight":
        return models
    return [light, *(m for m in models if m != light)]
