"""Durable human checkpoints: tool permission `approve` and turn_by_turn's review.

A checkpoint pauses the run until a `decision` input answers it:

- **tool calls** (`tool_permissions: {name: "approve"}` in any profile; every call in a
  turn_by_turn review): `approval.requested` carries `checkpoint_id` and `tool_calls`
  (`[{"tool_use_id", "name", "input"}]`, the calls the decision is about);
- **a proposal** (turn_by_turn, a reply without tool calls): `approval.requested`
  carries `checkpoint_id` and `proposal` (the reply's text).

The pause is durable: the checkpoint (`RunState.approvals.checkpoint`: id, the whole batch of
tool_use blocks in the model's order, the ids asked about, the plan gate's rejections, the
text) is part of the session state in Redis, and the session's status is
`awaiting_approval` (what `session.get` reports). No process holds anything in memory:
every service may restart while the run waits; the decision is applied to the stored
state by whichever router replica receives it.

The answer:

- `approve` a tool-calls checkpoint: exactly the stored calls are sent to the tools
  service, with no new model call;
- `deny` it: the calls asked about get error results "denied by the user: <note>" (they
  never reach a provider) and the loop continues: the model reads the results;
- `approve` a proposal: the run completes with the proposal's text as its answer;
- `deny` a proposal: a user message "The user did not accept this answer: <note>" joins
  the history and the model continues.

**One batch, one decision.** Auto calls in the same assistant message as calls that need
approval wait with them: the whole batch is held until the decision, then sent as one
step (auto calls run whatever the decision), so the results go back in ONE user message,
in the model's order, as the Messages API expects. Calls rejected by the plan gate are
never asked about and never run.

A decision whose `checkpoint_id` is not the session's open checkpoint (unknown, or
already answered) gets an `error` event `unknown_checkpoint` and changes nothing.
A `steer` while a checkpoint is open withdraws it (the held calls get "cancelled by
steering" results); `abort` ends the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopwire.shared.contract.event_fields import ApprovalDecidedFields, ApprovalRequestedFields
from loopwire.shared.contract.messages import ContentBlock, Message
from loopwire.shared.contract.protocol import ApprovalDecision
from loopwire.shared.contract.run_state import Checkpoint, RunState
from loopwire.shared.contract.session_state import SessionState

from .next_step import NextStep, NextStepExecuteTools, NextStepFinalOutput, NextStepReview, NextStepRunAgain
from .phases import change_phase
from .stages import Turn, route, user_message

DENIED_BY_USER = "denied by the user: {note}"
PROPOSAL_DENIED = "The user did not accept this answer: {note}. Revise it and propose again."
NO_NOTE = "no reason given"
REVIEW_REQUEST = ("Phase: review. The approved steps have run. Propose your answer for the user to approve: "
                  "what was done and the result; or, if more is needed, the next tool calls.")


def checkpoint_id(run: RunState) -> str:
    """One checkpoint per turn at most, so the run id and the turn name it."""
    return f"{run.run_id}-c{run.turn}"


def open_checkpoint(session: SessionState, run: RunState, *, kind: Literal["tool_calls", "proposal"],
                    calls: list[ContentBlock], ask: list[str], rejected: dict[str, str],
                    text: str) -> ApprovalRequestedFields:
    """Pause the run on a new checkpoint; the `approval.requested` fields to emit."""
    cp = Checkpoint(id=checkpoint_id(run), kind=kind, calls=calls, ask=ask, rejected=rejected, text=text)
    run.approvals.checkpoint = cp
    run.awaiting = "approval"
    run.pending_step = None
    run.tools.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    session.status = "awaiting_approval"
    fields: ApprovalRequestedFields = {"checkpoint_id": cp.id, "turn": run.turn}
    if kind == "proposal":
        fields["proposal"] = text
    else:
        fields["tool_calls"] = [{"tool_use_id": c["id"], "name": c["name"], "input": c.get("input") or {}}
                                for c in calls if c["id"] in ask]
    return fields


def decided_fields(cp: Checkpoint, body: ApprovalDecision) -> ApprovalDecidedFields:
    """The `approval.decided` fields of the decision `body` on `cp` (`note` only when given)."""
    fields = ApprovalDecidedFields(checkpoint_id=cp.id, decision=body.decision)
    if body.note:
        fields["note"] = body.note
    return fields


def open_for(session: SessionState, checkpoint: str) -> Checkpoint | None:
    """The session's open checkpoint if `checkpoint` names it, else None."""
    run = session.run
    if run is None or run.approvals.checkpoint is None or run.approvals.checkpoint.id != checkpoint:
        return None
    return run.approvals.checkpoint


def close(session: SessionState, run: RunState) -> Checkpoint:
    """The decision arrived (or a steer withdrew it): the run goes on."""
    cp = run.approvals.checkpoint
    assert cp is not None
    run.approvals.checkpoint = None
    session.status = "running"
    return cp


def user_denials(cp: Checkpoint, note: str | None) -> dict[str, str]:
    """The error reason of each call the user denied."""
    reason = DENIED_BY_USER.format(note=(note or "").strip() or NO_NOTE)
    return {i: reason for i in cp.ask}


def proposal_denied_message(note: str | None) -> Message:
    return user_message(PROPOSAL_DENIED.format(note=(note or "").strip() or NO_NOTE))


@dataclass(frozen=True)
class ReviewStage:
    """turn_by_turn's routing: every proposal goes to the user.

    - tool calls go on to the strategy loop, whose preview puts every runnable call in a
      checkpoint (calls made in `execute` move the run back to `review` first);
    - in `review`, a reply without tool calls becomes a `proposal` checkpoint;
    - in `execute`, a reply that ends its turn (the approved work is done) moves the run
      to `review` and asks again (`REVIEW_REQUEST`): the proposal is a new generation's,
      made in review, not the execute phase's closing words;
    - a reply cut by `max_tokens`, in any phase, ends the run with what it has: a cut
      proposal would ask the user to approve half an answer.

    The core moves the other phases: a denial is review→review, an approval
    review→execute, an approved answer execute→done."""

    name: str = "review"

    def after_generation(self, turn: Turn) -> NextStep | None:
        decision = route(turn.mode, "generate", turn.stop_reason)
        if decision == "execute_tools" and turn.tool_calls:
            return NextStepExecuteTools(calls=turn.tool_calls)
        if decision == "run_again":
            return NextStepRunAgain(reason=turn.stop_reason or "run_again")
        if turn.stop_reason == "max_tokens" or not turn.text.strip():
            return NextStepFinalOutput(status="completed", text=turn.text)
        if turn.run.profile_phase == "execute" and turn.stop_reason in ("end_turn", "stop_sequence", None):
            return NextStepRunAgain(append=[user_message(REVIEW_REQUEST)], reason="review", new_request=True,
                                    events=(change_phase(turn.run, "review", turn.transitions),))
        return NextStepReview(text=turn.text)

