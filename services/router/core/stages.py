"""Post-generation stages: each looks at a finished turn and may decide the next step.

Stages run in the profile's order; the first that returns a NextStep wins. Each stage is
one rule with a name, in a module of its own (loop_detection.py, vacuous.py,
commitment_gate.py), so a newcomer can read a profile as a list of rules.

A stage sees the transaction's working copy of the run (`turn.run`) and may update the
run's loop-control bookkeeping there (its ladder rung, its retry counters): the core is
still pure, because that copy is the next state `decide` returns. A stage that finds
something wrong with the turn adds a flag to `turn.flags`; a turn without flags is a good
turn, and a good turn resets the loop ladder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from .config import CoreConfig
from .next_step import NextStep, NextStepExecuteTools, NextStepFinalOutput, NextStepRunAgain
from .routing import route


@dataclass(frozen=True)
class Turn:
    """A finished generation as the stages see it."""

    session: SessionState
    run: RunState
    message: dict[str, Any]
    stop_reason: str | None
    text: str
    """The whole turn's assembled text (text blocks only, never thinking)."""
    tool_calls: list[dict[str, Any]]
    mode: str
    """`tools` or `chat`: whether the run offers tools."""
    config: CoreConfig = field(default_factory=CoreConfig)
    step_id: str = ""
    flags: set[str] = field(default_factory=set)
    """What the stages found wrong with this turn: `loop`, `vacuous`, `announced`."""
    transitions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The profile's transition table (`Profile.transitions`), for a stage that moves the
    run's phase (phases.change_phase)."""


class Stage(Protocol):
    @property
    def name(self) -> str: ...

    def after_generation(self, turn: Turn) -> NextStep | None: ...


@dataclass(frozen=True)
class RoutingStage:
    """The routing table on (mode, awaiting, stop_reason); always decides."""

    name: str = "routing"

    def after_generation(self, turn: Turn) -> NextStep | None:
        decision = route(turn.mode, turn.run.awaiting, turn.stop_reason)
        if decision == "execute_tools" and turn.tool_calls:
            return NextStepExecuteTools(calls=turn.tool_calls)
        if decision == "run_again":
            return NextStepRunAgain(reason=turn.stop_reason or "run_again")
        return NextStepFinalOutput(status="completed", text=turn.text)


def user_text(content: str | list[dict[str, Any]]) -> str:
    """The plain text of a user message's content (tool results and images left out)."""
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if b.get("type") == "text").strip()


def user_message(text: str) -> dict[str, Any]:
    """A user message of one text block: what the router adds to ask the model something."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def not_executed(calls: list[dict[str, Any]], why: str) -> list[dict[str, Any]]:
    """Error results for tool_use blocks that will not run: the Messages API needs an
    answer to every tool_use in the next user message."""
    return [{"type": "tool_result", "tool_use_id": c["id"], "is_error": True, "content": why} for c in calls]
