"""Post-generation stages: each looks at a finished turn and may decide the next step.

Stages run in the profile's order; the first that returns a NextStep wins. Each stage is
one rule with a name, so a newcomer can read a profile as a list of rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .next_step import NextStep, NextStepExecuteTools, NextStepFinalOutput, NextStepRunAgain
from .routing import route
from .state import RunState, SessionState


@dataclass(frozen=True)
class Turn:
    """A finished generation as the stages see it."""

    session: SessionState
    run: RunState
    message: dict[str, Any]
    stop_reason: str | None
    text: str
    tool_calls: list[dict[str, Any]]
    mode: str
    """`tools` or `chat`: whether the run offers tools."""


class Stage(Protocol):
    name: str

    def after_generation(self, turn: Turn) -> NextStep | None: ...


@dataclass(frozen=True)
class TurnLimitStage:
    """`limits.max_turns`: the model may not start another round of tools once the run
    has used its turns; the run ends with status `max_turns` and its best answer."""

    name: str = "turn_limit"

    def after_generation(self, turn: Turn) -> NextStep | None:
        wants_more = turn.mode == "tools" and bool(turn.tool_calls)
        if wants_more and turn.run.turn >= turn.run.config.max_turns:
            return NextStepFinalOutput(status="max_turns")
        return None


@dataclass(frozen=True)
class RoutingStage:
    """The routing table on (mode, phase, stop_reason); always decides."""

    name: str = "routing"

    def after_generation(self, turn: Turn) -> NextStep | None:
        decision = route(turn.mode, turn.run.phase, turn.stop_reason)
        if decision == "execute_tools" and turn.tool_calls:
            return NextStepExecuteTools(calls=turn.tool_calls)
        if decision == "run_again":
            return NextStepRunAgain(reason=f"stop_reason {turn.stop_reason}")
        return NextStepFinalOutput(status="completed", text=turn.text)
