"""Post-generation stages: each looks at a finished turn and may decide the next step.

Stages run in the profile's order (`first_step`); the first that returns a NextStep wins,
so a newcomer can read a profile as a list of rules. The short rules are here, each a
section below: vacuous answers, the commitment gate and the routing table. The longer
ones have modules of their own: the finish tool (finish.py), loop detection
(loop_detection.py), the plan phases (planning.py) and the review of every turn
(approval.py).

A stage sees the transaction's working copy of the run (`turn.run`) and may update the
run's loop-control bookkeeping there (its ladder rung, its retry counters): the core is
still pure, because that copy is the next state `decide` returns. A stage that finds
something wrong with the turn adds a flag to `turn.flags`; a turn without flags is a good
turn, and a good turn resets the loop ladder.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from loopwire.shared.contract.messages import ContentBlock, Message, text_of, tool_result_block
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from .config import CoreConfig
from .next_step import NextStep, NextStepExecuteTools, NextStepFinalOutput, NextStepRunAgain


@dataclass(frozen=True)
class Turn:
    """A finished generation as the stages see it."""

    session: SessionState
    run: RunState
    message: Message
    stop_reason: str | None
    text: str
    """The whole turn's assembled text (text blocks only, never thinking)."""
    tool_calls: list[ContentBlock]
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


def first_step(turn: Turn, stages: Iterable[Stage]) -> NextStep | None:
    """The next step of the first of `stages` that decides one, or None."""
    for stage in stages:
        step = stage.after_generation(turn)
        if step is not None:
            return step
    return None


def user_text(content: str | list[ContentBlock]) -> str:
    """The plain text of a user message's content (tool results and images left out)."""
    if isinstance(content, str):
        return content
    return text_of(content, " ").strip()


def user_message(text: str) -> Message:
    """A user message of one text block: what the router adds to ask the model something."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def not_executed(calls: list[ContentBlock], why: str) -> list[ContentBlock]:
    """Error results for tool_use blocks that will not run: the Messages API needs an
    answer to every tool_use in the next user message."""
    return [tool_result_block(c["id"], why, is_error=True) for c in calls]


# -- vacuous answers -----------------------------------------------------------------------
# Vacuous answers: a turn that ends the run with nothing useful in it.
#
# Judged on the whole turn's assembled text (its text blocks joined; thinking is not an
# answer, and judging token by token would misread a reply that starts with "."):
#
# - `empty`: no text at all;
# - `punctuation_only`: only punctuation and whitespace (".", "...", "?");
# - `bare_number`: only a number, when the user's latest request does not ask for one
#   ("0" answering "how many files?" is an answer; "0" answering "hello" is not).
#
# A turn that called a tool is exempt (it is doing something), and so are `pause_turn` and
# `refusal` turns. The remedy: a `retracted` event for the turn (clients drop its deltas),
# the turn is left out of the history, and the next generation gets an ephemeral note that
# names the actual problem. Retries are bounded (`vacuous_max_retries`); out of retries the
# weak answer is passed through as the run's answer, never turned into a failure.

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
        if turn.run.limits.vacuous_retries >= turn.config.vacuous_max_retries:
            return None  # out of retries: the weak answer passes through (routing ends the run)
        turn.run.limits.vacuous_retries += 1
        return NextStepRunAgain(notes=[retry_note(problem, turn.text)], reason="vacuous_retry",
                                retract=f"vacuous answer ({problem}): retried", drop_turn=True)


# -- the commitment gate -------------------------------------------------------------------
# CommitmentGate: a reply that promises work and stops gets one nudge to do it.
#
# Models sometimes end a turn with "Let me check the logs." and no tool call: the run
# would end with a promise instead of an answer. When tools are offered, an `end_turn`
# reply without tool calls whose last sentence announces an action ("Let me check...",
# "I'll analyze...", "Now I will run...") is answered with a user message asking the model
# to act now (or answer). Each such reply gets one nudge, bounded per run by
# `commitment_max_nudges`; past the bound the reply ends the run as it is.
#
# The nudge is a user message (stored): after an assistant reply the next request needs a
# user turn, or the API would read the assistant's text as a prefill to continue.

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
        if turn.run.limits.nudges >= turn.config.commitment_max_nudges:
            return None
        turn.run.limits.nudges += 1
        return NextStepRunAgain(append=[{"role": "user", "content": [
            {"type": "text", "text": NUDGE.format(said=said[:200])}]}], reason="commitment_nudge")


# -- the routing table -------------------------------------------------------------------
# The routing table: (mode, awaiting, stop_reason) -> what the run does next.
#
# `mode` is `tools` when the run offers tools to the model and `chat` otherwise; `awaiting`
# is what the run waited for when the result arrived (`RunState.awaiting`). A stop reason
# the table does not know ends the run with what it has rather than guessing.

Route = Literal["execute_tools", "run_again", "final"]

ROUTES: dict[tuple[str, str, str], Route] = {
    ("tools", "generate", "tool_use"): "execute_tools",
    ("tools", "generate", "end_turn"): "final",
    ("tools", "generate", "stop_sequence"): "final",
    # The answer was cut by max_tokens: end with what we have (a partial answer is
    # better than a loop that asks again for the same budget).
    ("tools", "generate", "max_tokens"): "final",
    # A server-side tool paused a long turn: send it back as is to continue.
    ("tools", "generate", "pause_turn"): "run_again",
    ("tools", "generate", "refusal"): "final",
    # Without tools offered a tool_use cannot be honoured: the text is the answer.
    ("chat", "generate", "tool_use"): "final",
    ("chat", "generate", "end_turn"): "final",
    ("chat", "generate", "stop_sequence"): "final",
    ("chat", "generate", "max_tokens"): "final",
    ("chat", "generate", "pause_turn"): "run_again",
    ("chat", "generate", "refusal"): "final",
}


def route(mode: str, awaiting: str, stop_reason: str | None) -> Route:
    return ROUTES.get((mode, awaiting, stop_reason or "end_turn"), "final")


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
