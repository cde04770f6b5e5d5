"""The next step's work request: the generation's models, budget and tools, and the phase
moves around it.

A generation is asked of memory (`memory.assemble`, which assembles the context and
hands it to llm): with the notes it needs (the converging note when a budget is spent,
the plan or the workspace snapshot of a planned profile, the progress note of
tool_batches.py), the tools the strategy loop offers, `max_tokens` within the
token budget, and the models of its tier. The tool batches are tool_batches.py's.

Model tiers: which of the run's models does which work. StartRun `model.selection` is
`manual` (the default: every generation uses the run's models, `primary` then
`fallbacks`) or `auto`: the work a smaller model does as well runs on
`model.lightweight`. That work is declared here, once:

| work | tier | where |
|---|---|---|
| the run's generations | `primary` | memory.assemble → llm |
| plan building (agentic_planned's `plan` phase) | `lightweight` | `Profile.model_tiers` |
| compaction summaries, observations, reflections | `lightweight` | memory's own calls (`RunConfig.memory_model`) |
| progress reminders | `lightweight` | tool_batches.py builds them from the run's bookkeeping: no model call |

A phase's generations have the tier its profile declares (`Profile.model_tiers`, phase →
tier; `primary` when it declares none; `any` takes the run's models as they are). A
lightweight generation asks `model.lightweight` first and falls back to the run's own
models. `model.memory` (and, below it, the operator's LOOPWIRE_MEMORY_MODEL) stays the
explicit choice for memory's calls: with `auto` and no `model.memory`, they use the
lightweight model (run_config.py reads `memory_model` and `lightweight_of` into the
run's config). Every `message` event's `model` names the model that answered.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import AssembleContext
from loopwire.shared.contract.protocol import RESERVED_TOOL_NAMES, ModelSpec
from loopwire.shared.contract.run_state import RunState

from . import budget, planning, strategy_loop
from .effects import PublishWork
from .executor_profiles import spec_for
from .finish import FINISH_SPEC, OUT_OF_BUDGET_NOTE
from .phases import change_phase
from .planning import UPDATE_PLAN_SPEC
from .profiles import ModelTier, Profile
from .tenant_quotas import TENANT_QUOTA
from .transition import Transition

# Model tiers: which of the run's models does which work (the table above).

MEMORY_TIER: ModelTier = "lightweight"
"""Memory's own calls: compaction summaries, observations, reflections."""


def lightweight_of(spec: ModelSpec, operator_default: str | None = None) -> str | None:
    """The model of the lightweight tier a StartRun asks for (`auto`: `model.lightweight`,
    else the operator's LOOPWIRE_LIGHTWEIGHT_MODEL), or None (`manual`, or neither set)."""
    return (spec.lightweight or operator_default) if spec.selection == "auto" else None


def memory_model(spec: ModelSpec, operator_default: str | None,
                 lightweight_default: str | None = None) -> str | None:
    """The model of memory's calls: `model.memory`, else the lightweight model (`auto`),
    else the operator's LOOPWIRE_MEMORY_MODEL; None: the run's models."""
    # memory's work is MEMORY_TIER
    return spec.memory or lightweight_of(spec, lightweight_default) or operator_default


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


# The next step's work request.


def request_generation(tx: Transition, run: RunState, profile: Profile, *, notes: list[str] | None = None) -> None:
    """Ask memory for the next generation. When a budget is exhausted, this generation is
    the converging one: no tools, a note asking for the best answer now."""
    notes = list(notes or [])
    cfg = run.config
    # The tenant's day spent (tenant_quotas.py) converges the run as its own budget would.
    allowed = budget.next_generation(run, cfg.max_tokens,
                                     spent_elsewhere=TENANT_QUOTA if run.budget.quota_spent else None)
    if allowed.converges_now:
        notes.append(OUT_OF_BUDGET_NOTE if strategy_loop.finish_offered(run, profile) else budget.FINAL_ANSWER_NOTE)
    if profile.planned and run.limits.converging is None:
        if run.profile_phase == "plan":
            notes.append(planning.plan_note(run, run.config.tools))
        elif run.profile_phase == "execute" and run.plan.steps:
            notes.append(planning.status_note(run))
    if (profile.snapshots_workspace and run.plan.workspace and not _workspace_tool_ran(run)
            and run.limits.converging is None and not (profile.planned and run.profile_phase == "plan")):
        # The WorkspaceSnapshot, in every phase until a tool has run that could change it
        # (the plan phase's note holds it already).
        notes.append(run.plan.workspace)
    offer = strategy_loop.offer(run, profile)
    run.tools.active = offer.active
    run.awaiting = "generate"
    run.gen_seq += 1
    ids = message_ids.generation_step_ids(run.run_id, run.gen_seq)
    run.pending_step = ids.step_id
    env = AssembleContext(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=ids.step_id, turn=run.turn + 1,
        history_len=tx.st.history_len, system=cfg.system, ephemeral_notes=notes,
        tools=offer.tools, offer_tools=offer.offer, extra_tools=offer.extra,
        models=generation_models(run, profile), max_tokens=allowed.max_tokens,
        temperature=run.limits.temperature if run.limits.temperature is not None else cfg.temperature,
        reduce_context=run.limits.context_retries > 0, context_window=cfg.context_window,
        compaction_at_pct=cfg.compaction_at_pct, actor=cfg.actor, memory_model=cfg.memory_model, trace=run.trace,
        executor=spec_for(run) if profile.executor is not None else None,
        prompt_cache="off" if cfg.prompt_cache == "off" else "auto",
        prompt_cache_ttl="1h" if may_wait_on_a_person(run, profile) else "5m",
    )
    tx.effects.append(PublishWork(work=env, envelope=_assemble_json(env), msg_id=ids.msg_id))


def may_wait_on_a_person(run: RunState, profile: Profile) -> bool:
    """The run may stop for a decision (every turn reviewed, or a tool under `approve`):
    its cached prefix should outlast a wait longer than the cache's 5 minutes."""
    return profile.reviews_every_turn or "approve" in run.config.tool_permissions.values()


def _workspace_tool_ran(run: RunState) -> bool:
    """A tool other than the reserved ones (which the core answers, touching no
    workspace) has run in this run."""
    return any(name not in RESERVED_TOOL_NAMES for name in run.tools.used)


_NO_EXTRA_TOOLS = {"extra_tools": True}
_RESERVED_SPECS = {id(spec): spec.model_dump(mode="json") for spec in (FINISH_SPEC, UPDATE_PLAN_SPEC)}
"""The reserved tools' specs, dumped once: module constants (an id of theirs is never
another object's), offered by most generations, and their input schemas were three
fifths of an envelope's dump. Shared by every envelope that offers them: nothing changes
an effect's dicts after its decision (transition.py)."""


def _assemble_json(env: AssembleContext) -> dict[str, Any]:
    """`env.model_dump(mode="json")`, the reserved tools' specs as dumped once."""
    out = env.model_dump(mode="json", exclude=_NO_EXTRA_TOOLS)
    out["extra_tools"] = [_RESERVED_SPECS.get(id(spec)) or spec.model_dump(mode="json") for spec in env.extra_tools]
    return out


def move_phase(tx: Transition, run: RunState, to: str, *, profile: Profile) -> None:
    """Move the run to profile phase `to` (checked against the profile's table) and emit
    `phase.changed`."""
    tx.emit_spec(run, change_phase(run, to, profile.transitions), "")


def to_review(tx: Transition, run: RunState, profile: Profile) -> None:
    """turn_by_turn: a proposal made after executing goes back to review (execute→review);
    one made in review stays there."""
    if run.profile_phase == "execute" and profile.reviews_every_turn:
        move_phase(tx, run, "review", profile=profile)
