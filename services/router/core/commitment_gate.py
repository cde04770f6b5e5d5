"""CommitmentGate: a reply that promises work and stops gets one nudge to do it.

Models sometimes end a turn with "Let me check the logs." and no tool call: the run
would end with a promise instead of an answer. When tools are offered, an `end_turn`
reply without tool calls whose last sentence announces an action ("Let me check...",
"I'll analyze...", "Now I will run...") is answered with a user message asking the model
to act now (or answer). Each such reply gets one nudge, bounded per run by
`commitment_max_nudges`; past the bound the reply ends the run as it is.

The nudge is a user message (stored): after an assistant reply the next request needs a
user turn, or the API would read the assistant's text as a prefill to continue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .next_step import NextStep, NextStepRunAgain
from .stages import Turn

_ANNOUNCE = re.compile(
    r"^(?:(?:ok(?:ay)?|sure|alright|great|good|first|next|now|then|so|understood)[,!.:]?\s+)*"
    r"(?:let me|let's|let us|i'll|i will|i'm going to|i am going to|i'm gonna|i shall|i need to|i'll now|"
    r"i will now|i'm now going to|allow me to)\s+(?P<action>[a-z][\w-]*)",
    re.IGNORECASE,
)
_NOT_ACTIONS = frozenset({
    "know", "be", "help", "summarize", "summarise", "explain", "clarify", "recap", "note", "say", "answer",
    "conclude", "wrap", "end", "stop", "leave", "assume", "repeat", "reiterate", "mention",
    "not", "never",  # "I will not add." declines; it promises nothing
})
"""Verbs whose announcement is itself the answer ("Let me know...", "Let me explain: ...")."""
_SENTENCE_END = re.compile(r"(?<=[.!?…:])\s+")

NUDGE = ("You said {said!r} but ended your turn without calling a tool. If a tool is needed, call it now; "
         "otherwise give your final answer.")


def last_sentence(text: str) -> str:
    parts = [p for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    return parts[-1].strip() if parts else ""


def announced_action(text: str) -> str | None:
    """The announcing sentence when `text` ends by promising an action, else None."""
    sentence = last_sentence(text)
    match = _ANNOUNCE.match(sentence)
    if match is None or match.group("action").lower() in _NOT_ACTIONS:
        return None
    return sentence


@dataclass(frozen=True)
class CommitmentGateStage:
    name: str = "commitment_gate"

    def after_generation(self, turn: Turn) -> NextStep | None:
        if turn.mode != "tools" or turn.tool_calls or turn.stop_reason not in ("end_turn", None):
            return None
        said = announced_action(turn.text)
        if said is None:
            return None
        turn.flags.add("announced")
        if turn.run.nudges >= turn.config.commitment_max_nudges:
            return None
        turn.run.nudges += 1
        return NextStepRunAgain(append=[{"role": "user", "content": [
            {"type": "text", "text": NUDGE.format(said=said[:200])}]}], reason="commitment_nudge")
