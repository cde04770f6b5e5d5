"""The next step of a run, as data (openai-agents' NextStep* in spirit).

Stages look at a finished generation (or tool batch) and answer with one of these; the
core turns the chosen step into state changes and effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NextStepRunAgain:
    """Generate again, after adding these user-side messages to the history."""

    append: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Ephemeral system reminders for the next generation only."""
    reason: str = ""


@dataclass(frozen=True)
class NextStepExecuteTools:
    calls: list[dict[str, Any]]
    """tool_use blocks, in the model's order."""


@dataclass(frozen=True)
class NextStepFinalOutput:
    status: str
    """A `run.ended` status: completed, max_turns, failed, aborted, ..."""
    text: str | None = None
    """Final text; None means the run's best answer so far."""
    error: tuple[str, str] | None = None
    """(code, message) to emit as an `error` event before the end."""


NextStep = NextStepRunAgain | NextStepExecuteTools | NextStepFinalOutput
