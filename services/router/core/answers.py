"""The run's answers: what `run.ended.final_text` is made of.

Every turn that answers (it ends without tool calls, kept in the history) adds its text
to `RunState.answers`, and the run's final text is its answers joined in order: a run
whose answer comes in parts (a reply nudged to act by the commitment gate, then the
result; the answers of two outer iterations; the end of the execute phase and the
verification) hands back all of it, not only its last turn.

Not an answer:

- a turn whose text is retracted or dropped (a vacuous answer retried, a steered
  generation, whose result never arrives), or that the loop ladder judged a loop;
- a turn with tool calls, and a `pause_turn` (the turn goes on in the next generation);
- a plan phase's reply: its text is the plan (planning.py), shown in `plan.updated`;
- in a profile whose every proposal the user reviews (turn_by_turn), a reply until the
  user approves it: the approved proposal is the run's answer (approval.py).

A run that ends with no answer at all ends with its best text so far (the latest turn's
text), or its technical summary (run_lifecycle.end_run). The finish tool's summary is
the run's closing answer, after the others.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import text_of

from .profiles import PROFILES
from .stages import Turn

SEPARATOR = "\n\n"
NOT_ANSWERS = frozenset({"tool_use", "pause_turn"})
"""Stop reasons of a turn that is not over."""


def is_answer(turn: Turn, phase: str, kept: bool) -> bool:
    """Whether `turn` (made in profile phase `phase`; `kept`: it stays in the history,
    unretracted) is one of the run's answers."""
    return answers_in(turn.run.config.profile, phase, text=turn.text, stop_reason=turn.stop_reason,
                      calls=bool(turn.tool_calls), kept=kept and "loop" not in turn.flags)


def answers_in(profile: str, phase: str, *, text: str, stop_reason: str | None, calls: bool, kept: bool) -> bool:
    """The rule itself, on what a turn is (also as its `message` event tells it)."""
    if not kept or calls or stop_reason in NOT_ANSWERS or not text.strip() or phase == "plan":
        return False
    return not PROFILES[profile].reviews_every_turn


def from_events(profile: str, events: list[AnyEvent], retracted: set[Any]) -> list[str]:
    """The answers of a run as its events tell them (a run rebuilt from its transcript:
    journal_resume.py): its `message` events in order, each in the phase the
    `phase.changed` events before it left, less the turns in `retracted`."""
    out: list[str] = []
    phase = PROFILES[profile].initial_phase
    for e in events:
        if e["kind"] == "phase.changed":
            phase = str(e.get("to"))
        elif e["kind"] == "message":
            blocks = [b for b in (e.get("message") or {}).get("content") or [] if isinstance(b, dict)]
            text = text_of(blocks)
            calls = any(b.get("type") == "tool_use" for b in blocks)
            if answers_in(profile, phase, text=text, stop_reason=e.get("stop_reason"), calls=calls,
                          kept=e.get("turn") not in retracted):
                out.append(text)
    return out


def final_text(answers: list[str], closing: str | None, fallback: str) -> str:
    """The answers joined in order, then `closing`; `fallback` when there are none."""
    parts = [a for a in answers if a.strip()]
    if closing is not None and closing.strip():
        parts.append(closing)
    return SEPARATOR.join(parts) if parts else fallback
