"""What a finished turn leads to: the profile's stages choose the next step, as data,
and the core carries it out (`take_turn`: resolved in `resolve`, applied in `apply_step`).

After a generation the profile's stages run in order (profiles.py) and the first to
answer gives the next step (next_step.py); the converging answer (the last, tool-less
generation of a run out of budget or caught in a loop) ends the run instead. A step that
would generate again past a limit ends the run (`within_limits`). `apply_step` turns the
step into the transition: a tool batch to dispatch, a proposal to review, another
generation, the converging generation, the follow-ups taken at the outer boundary, or
the end of the run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.run_state import RunState

from . import answers, approval, budget, loop_detection, strategy_loop
from .config import CoreConfig
from .effects import EmitEvent
from .finish import finish_call, out_of_budget_conclusion, own_conclusion
from .follow_ups import take_at_outer_boundary
from .next_step import (
    NextStep,
    NextStepConverge,
    NextStepExecuteTools,
    NextStepFinalOutput,
    NextStepReview,
    NextStepRunAgain,
)
from .profiles import Profile
from .run_lifecycle import end_run
from .stages import Turn, first_step
from .step_requests import request_generation, to_review
from .tool_batches import dispatch, inner_limit, outer_limit
from .transition import Transition


def take_turn(tx: Transition, turn: Turn, *, profile: Profile, schemas: dict[str, dict[str, Any]] | None,
              events: list[EmitEvent]) -> None:
    """A finished generation's turn: its next step (`resolve`); the turn kept in the
    history (unless the step drops it) and counted among the run's answers (answers.py);
    its events (`events`: its `message` and the budget warnings, then the step's), in one
    step with the kept message; then the step carried out (`apply_step`)."""
    run, text = turn.run, turn.text
    phase = run.profile_phase  # the phase the turn was made in (a stage may move it)
    step = resolve(turn, profile)
    voids = step if isinstance(step, NextStepRunAgain | NextStepConverge) else None
    kept = None
    if voids is None or not voids.drop_turn:
        if turn.message.get("content"):
            kept = turn.message
        if text.strip():
            run.last_text = text
        if answers.is_answer(turn, phase, kept=not (isinstance(step, NextStepRunAgain) and step.retract)):
            run.answers.append(text)
    events = events + [EmitEvent(kind=spec.kind, key=message_ids.event_key(spec.kind, turn.step_id, n), run_id=run.run_id,
                                 fields=spec.fields.copy()) for n, spec in enumerate(step.events)]
    if voids is not None and voids.retract:
        events.append(EmitEvent(kind="retracted", key=message_ids.event_key("retracted", turn.step_id), run_id=run.run_id,
                                fields={"turn": run.turn, "reason": voids.retract}))
    tx.add_turn(kept, events)
    apply_step(tx, run, step, profile=profile, cfg=turn.config, schemas=schemas)


def resolve(turn: Turn, profile: Profile) -> NextStep:
    """The turn's next step: the stages' (`next_step`), within the limits
    (`within_limits`); a run its budget stopped ends `budget_exhausted`, whatever the
    model meant."""
    run = turn.run
    step = within_limits(run, next_step(turn, profile), profile=profile, text=turn.text, cfg=turn.config)
    if isinstance(step, NextStepFinalOutput) and step.status == "completed":
        cause = budget.end_cause(run, turn.stop_reason)
        if cause is not None:
            step = replace(step, status="budget_exhausted", reason=cause)
    return step


def next_step(turn: Turn, profile: Profile) -> NextStep:
    """The converging answer ends the run; otherwise the profile's stages decide."""
    run = turn.run
    if run.limits.converging is not None:
        conclusion, text, closing = None, turn.text, None
        call = finish_call(turn.tool_calls) if run.limits.converging == "budget_exhausted" else None
        if call is not None and strategy_loop.finish_offered(run, profile) and run.config.finish_tool is not None:
            conclusion, text = own_conclusion(call, turn.text or run.last_text)
            closing = text
        elif call is not None and strategy_loop.finish_offered(run, profile):
            conclusion = out_of_budget_conclusion(call, turn.text, run.last_text)
            conclusion["executed"] = [dict(e) for e in run.tools.executed]
            text = closing = conclusion["summary"]
        # Without a finish call, end_run gives the run its technical summary.
        return NextStepFinalOutput(status=run.limits.converging, text=text, reason=run.limits.converge_reason,
                                   conclusion=conclusion, closing=closing)
    step = first_step(turn, profile.stages)
    if not turn.flags:
        # An accepted turn restores the remedies: the loop ladder and the vacuous-retry
        # allowance are shared, so a long run keeps them after using them (stages.py, vacuous answers).
        run.limits.loop_level = 0
        run.limits.vacuous_retries = 0
    return step or NextStepFinalOutput(status="completed", text=turn.text)


def within_limits(run: RunState, step: NextStep, *, profile: Profile, text: str, cfg: CoreConfig) -> NextStep:
    """A step that would generate again past a limit ends the run instead, keeping the
    turn (a vacuous answer that would have been retried is passed through). A tool batch
    runs whatever the limit: its round is the last one, and the run ends after its
    results (tool_batches.after_batch)."""
    if isinstance(step, NextStepFinalOutput | NextStepReview | NextStepExecuteTools):
        return step  # a review needs no further generation: approved, it is the answer
    limit = inner_limit(run, profile, cfg)
    if limit is None:
        return step
    # The step's events stay (its stage already moved the run: a phase change, a loop
    # detected), but not a `steering` one: the course it announces is not taken.
    events = tuple(e for e in step.events if e.kind != "steering")
    if isinstance(step, NextStepConverge):
        return NextStepFinalOutput(status=step.status, text=text, reason=step.reason, events=events)
    return NextStepFinalOutput(status="max_turns", text=text, reason=limit, events=events)


def apply_step(tx: Transition, run: RunState, step: NextStep, *, profile: Profile, cfg: CoreConfig,
               schemas: dict[str, dict[str, Any]] | None = None) -> None:
    """Carry out the turn's next step (`resolve`'s)."""
    if isinstance(step, NextStepExecuteTools):
        dispatch(tx, run, step.calls, profile=profile, schemas=schemas, cfg=cfg)
    elif isinstance(step, NextStepReview):
        to_review(tx, run, profile)
        fields = approval.open_checkpoint(tx.st, run, kind="proposal", calls=[], ask=[], rejected={},
                                          text=step.text)
        tx.emit("approval.requested", message_ids.event_key("approval.requested", fields["checkpoint_id"]), run.run_id, fields)
    elif isinstance(step, NextStepRunAgain):
        for m in step.append:
            tx.add_message(m)
        if step.reason in ("vacuous_retry", "commitment_nudge"):
            tx.count(step.reason)
        if step.new_request:
            loop_detection.clear(run)
        request_generation(tx, run, profile, notes=step.notes)
    elif isinstance(step, NextStepConverge):
        for m in step.append:
            tx.add_message(m)
        run.limits.converging, run.limits.converge_reason = step.status, step.reason
        request_generation(tx, run, profile, notes=step.notes)
    elif step.status == "completed" and not profile.single_generation \
            and step.conclusion is None and run.profile_phase != "done" and (tx.st.steering or tx.st.queued):
        limit = outer_limit(run, profile, cfg) or ("max_turns" if run.turn >= run.config.max_turns else None)
        if limit is not None:
            # Follow-ups past the limit start the next run (end_run), as on an idle session.
            end_run(tx, "max_turns", step.text, cfg=cfg, reason=limit)
        else:
            take_at_outer_boundary(tx, run)
            request_generation(tx, run, profile)
    else:
        end_run(tx, step.status, step.text, cfg=cfg, error=step.error, reason=step.reason,
                conclusion=step.conclusion, closing=step.closing)
