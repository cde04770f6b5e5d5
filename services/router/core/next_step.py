"""The next step of a run, as data (openai-agents' NextStep* in spirit).

Stages look at a finished generation and answer with one of these; the core turns the
chosen step into state changes and effects. Besides its main intent a step may carry
`events` to emit with it (e.g. `loop.detected`), and a run-again step may void the turn
it answers (`retract`, `drop_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.events import EventFields
from loopwire.shared.contract.messages import ContentBlock, Message
from loopwire.shared.contract.protocol import RunStatus


@dataclass(frozen=True)
class EventSpec:
    """An event a step emits (its key is derived from the step that produced it)."""

    kind: str
    fields: EventFields


@dataclass(frozen=True)
class NextStepRunAgain:
    """Generate again, after adding these user-side messages to the history."""

    append: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Ephemeral system reminders for the next generation only."""
    reason: str = ""
    """A code: `pause_turn`, `vacuous_retry`, `commitment_nudge`, `loop_redirect`, ..."""
    events: tuple[EventSpec, ...] = ()
    retract: str | None = None
    """Emit `retracted` for this turn with this reason: clients drop its deltas."""
    drop_turn: bool = False
    """Do not store this turn's assistant message in the history."""
    new_request: bool = False
    """The system asks for something else (the proposal to review, a verification, the
    plan's execution): an answer that restates the last one is what was asked for, not a
    repetition, so the loop window starts again (loop_detection.clear). A nudge that asks
    again for what the model did not do is not one: repeating itself then is a loop."""


@dataclass(frozen=True)
class NextStepExecuteTools:
    """Run the turn's tool calls through the strategy loop (strategy_loop.py): the plan
    gate, the preview (an approval checkpoint when one is needed), then execution."""

    calls: list[ContentBlock]
    """tool_use blocks, in the model's order."""
    events: tuple[EventSpec, ...] = ()


@dataclass(frozen=True)
class NextStepReview:
    """turn_by_turn: a text-only proposal goes to the user for review (an approval
    checkpoint with `proposal`); approved, it is the run's answer."""

    text: str
    events: tuple[EventSpec, ...] = ()


@dataclass(frozen=True)
class NextStepConverge:
    """One last generation without tools, whose answer ends the run with `status`."""

    status: RunStatus
    reason: str
    """`run.ended.reason`: why the run converges (a limit, a detection)."""
    append: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    events: tuple[EventSpec, ...] = ()
    retract: str | None = None
    """Emit `retracted` for this turn with this reason (as NextStepRunAgain's)."""
    drop_turn: bool = False
    """Do not store this turn's assistant message in the history."""


@dataclass(frozen=True)
class NextStepFinalOutput:
    status: RunStatus
    """A `run.ended` status: completed, max_turns, failed, aborted, ..."""
    text: str | None = None
    """Final text; None means the run's best answer so far."""
    error: tuple[str, str] | None = None
    """(code, message) to emit as an `error` event before the end."""
    reason: str | None = None
    """`run.ended.reason` (loopwire's addition, docs/protocol.md), e.g. which limit ended the run."""
    events: tuple[EventSpec, ...] = ()
    conclusion: dict[str, Any] | None = None
    """`run.ended.conclusion`: the finish tool's normalised input (finish.py)."""
    closing: str | None = None
    """The run's closing answer, after the answers of its turns (answers.py): the finish
    tool's summary."""


NextStep = NextStepRunAgain | NextStepExecuteTools | NextStepReview | NextStepConverge | NextStepFinalOutput
