"""Vacuous answers: a turn that ends the run with nothing useful in it.

Judged on the whole turn's assembled text (its text blocks joined; thinking is not an
answer, and judging token by token would misread a reply that starts with "."):

- `empty`: no text at all;
- `punctuation_only`: only punctuation and whitespace (".", "...", "?");
- `bare_number`: only a number, when the user's latest request does not ask for one
  ("0" answering "how many files?" is an answer; "0" answering "hello" is not).

A turn that called a tool is exempt (it is doing something), and so are `pause_turn` and
`refusal` turns. The remedy: a `retracted` event for the turn (clients drop its deltas),
the turn is left out of the history, and the next generation gets an ephemeral note that
names the actual problem. Retries are bounded (`vacuous_max_retries`); out of retries the
weak answer is passed through as the run's answer, never turned into a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .next_step import NextStep, NextStepRunAgain
from .stages import Turn

_PUNCTUATION_ONLY = re.compile(r"^[\W_]+$", re.UNICODE)
_BARE_NUMBER = re.compile(r"^[-+]?(\d[\d,_ ]*)?\d([.,]\d+)?\s*%?$")
_QUANTITY_WORDS = re.compile(
    r"\b(how (many|much|old|long|far|often|big|large|small|tall|high|fast)|count|number|total|sum|"
    r"calculate|compute|evaluate|solve|average|mean|median|percent(age)?|ratio|rate|price|cost|"
    r"age|year|when|score|amount|quantity|size|length|width|height|weight|distance|duration|"
    r"temperature|plus|minus|times|multipl\w*|divid\w*|difference|product|square|root|digit|"
    r"index|rank|which (one|number)|pick a number|estimate)\b",
    re.IGNORECASE,
)
_MATH = re.compile(r"\d|[+*^=]")

NOTES = {
    "empty": "Your previous reply was empty. Answer the user's latest request in words.",
    "punctuation_only": ("Your previous reply was only punctuation ({text!r}), which answers nothing. "
                         "Answer the user's latest request in words."),
    "bare_number": ("Your previous reply was only the number {text!r}, but the user's latest request does "
                    "not ask for a number. Answer the request itself in words."),
}


def asks_for_a_number(prompt: str) -> bool:
    """Whether a bare number can answer `prompt`: it asks for a quantity, or it is
    arithmetic (digits, operators)."""
    return bool(_QUANTITY_WORDS.search(prompt) or _MATH.search(prompt))


def vacuous_problem(text: str, prompt: str) -> str | None:
    """`empty`, `punctuation_only`, `bare_number` or None (the text is an answer)."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if _PUNCTUATION_ONLY.match(stripped):
        return "punctuation_only"
    if _BARE_NUMBER.match(stripped) and not asks_for_a_number(prompt):
        return "bare_number"
    return None


def retry_note(problem: str, text: str) -> str:
    return NOTES[problem].format(text=text.strip()[:40])


@dataclass(frozen=True)
class VacuousAnswerStage:
    name: str = "vacuous_answer"

    def after_generation(self, turn: Turn) -> NextStep | None:
        if turn.tool_calls or turn.stop_reason in ("pause_turn", "refusal"):
            return None
        problem = vacuous_problem(turn.text, turn.run.last_prompt)
        if problem is None:
            return None
        turn.flags.add("vacuous")
        if turn.run.vacuous_retries >= turn.config.vacuous_max_retries:
            return None  # out of retries: the weak answer passes through (routing ends the run)
        turn.run.vacuous_retries += 1
        return NextStepRunAgain(notes=[retry_note(problem, turn.text)], reason="vacuous_retry",
                                retract=f"vacuous answer ({problem}): retried", drop_turn=True)
