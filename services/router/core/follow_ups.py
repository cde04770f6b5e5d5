"""What the user says while a run runs: steering applies at once, follow-ups at the outer
boundary.

A `steer` abandons the step in flight (a generation's streamed text is retracted; the
calls of a tool batch, or of an open checkpoint, get a "cancelled by steering" result,
so the history stays valid), tells the services doing that work to stop (a `cancel`
notice) and joins the history; the core then asks for a new generation. A `message`
while a run runs is queued and taken at the outer boundary: when the model ends its
answer, the queued messages join the history as one user message and the same run goes
on (`take_at_outer_boundary`), instead of a new run starting. Follow-ups that arrive too
late for it start the next run (run_lifecycle.end_run). `SessionState.steering` only
holds steering kept by state written before steering applied at once.

A steer and the follow-ups taken are reported with a `steering` event (steering.py).
"""

from __future__ import annotations

from typing import Literal

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.event_fields import RetractedFields
from loopwire.shared.contract.messages import ContentBlock, as_blocks
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from . import approval, loop_detection
from .effects import PublishNotice
from .history_repair import batch_results
from .stages import user_text
from .steering import steering_fields
from .transition import Transition

STEERED_GENERATION = "steered: the answer in progress is void"
STEERED_TOOL = "Cancelled by steering: the user sent a new instruction before this call finished."
PROMPT_CHARS = 2000
"""How much of a user request the run keeps as its task and its last prompt."""


def truncate(text: str, limit: int = PROMPT_CHARS) -> str:
    """`text` with its white space folded, cut to `limit` characters (an ellipsis last)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def drain_steering(st: SessionState) -> list[ContentBlock]:
    """Steering messages kept by state written before steering applied at once."""
    blocks = [b for m in st.steering for b in as_blocks(m["content"])]
    st.steering = []
    return blocks


def drain_queued(st: SessionState) -> list[ContentBlock]:
    blocks = [b for m in st.queued for b in as_blocks(m["content"])]
    st.queued = []
    return blocks


def steer(tx: Transition, run: RunState, content: list[ContentBlock]) -> None:
    """A steer with `content` on a running run: the step in flight is abandoned, the
    message joins the history (the abandoned calls' results first) and the loop window
    starts afresh (the caller asks for the next generation). The abandoned step's late
    result no longer matches `pending_step` and is ignored."""
    message = list(content)
    # What the steer cut short (the `steering` event's `interrupted`): the design's
    # mid-generation priority (`generation`), cancel-executing (`tools`), a withdrawn
    # checkpoint (`approval`); between steps, nothing.
    interrupted: Literal["generation", "tools", "approval"] | None = None
    if run.awaiting in ("tools", "approval") and run.tools.pending_calls:
        interrupted = "tools" if run.awaiting == "tools" else "approval"
        message = batch_results(run, run.tools.pending_calls, STEERED_TOOL) + message
        run.tools.pending_calls = []
        run.tools.answered = []
    elif run.awaiting == "generate" and run.pending_step is not None:
        interrupted = "generation"
        tx.emit("retracted", message_ids.event_key("retracted", run.pending_step, "steer"), run.run_id, RetractedFields(turn=run.turn + 1,
                reason=STEERED_GENERATION))
    if run.approvals.checkpoint is not None:  # a steer withdraws the open checkpoint
        interrupted = "approval"
        approval.close(tx.st, run)  # turn_by_turn stays in review: the next reply is reviewed
    tx.emit("steering", message_ids.event_key("steering", tx.inp.input_id), run.run_id,
            steering_fields(run, "priority_queue", interrupted=interrupted))
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))
    tx.add_message({"role": "user", "content": message})
    run.last_prompt = truncate(user_text(content), PROMPT_CHARS)
    loop_detection.clear(run)
    tx.count("steer")


def take_at_outer_boundary(tx: Transition, run: RunState) -> None:
    """The outer boundary: follow-ups that arrived during the run are taken now, with the
    full history, instead of ending and starting a new run (the caller asks for the next
    generation)."""
    messages = len(tx.st.steering) + len(tx.st.queued)
    content = drain_steering(tx.st) + drain_queued(tx.st)
    tx.add_message({"role": "user", "content": content}, source="follow_up")
    run.limits.outer += 1
    tx.emit("steering", message_ids.event_key("steering", run.run_id, f"o{run.limits.outer}"), run.run_id,
            steering_fields(run, "follow_up_queue", messages=messages))
    run.limits.inner = 0
    run.last_prompt = truncate(user_text(content), PROMPT_CHARS)
    loop_detection.clear(run)
