"""Loop detection and its escalation ladder.

Every turn leaves a signature in the run's window (`RunState.limits.loop_window`, the latest
`WINDOW` turns): the sorted signatures of its tool calls (name + a hash of the canonical
input), or, for a turn without calls, its normalised text. Three detectors read it:

- `repeated_tool_call`: one call (same name, same input) in `loop_repeat_threshold`
  consecutive turns;
- `repeated_text`: the same or a near-identical answer (normalised: lower case,
  whitespace and punctuation collapsed, digits kept; then >= 90% similar) in
  `loop_text_repeats` consecutive turns;
- `alternating_cycle`: a short cycle of distinct turns, A,B,A,B or A,B,C,A,B,C.

The ladder, one rung per detection while the loop goes on:

    0 redirect      a user message "Loop detected. Please try a different approach..."
    1 switch_model  the run's next fallback model becomes its primary (a `model.fallback`
                    event, reason `loop_detected`); without one the temperature is raised
                    from the run's (or, unset, from the model's default) by 0.3, up to the
                    API's maximum, and the model is redirected once more
    2 terminate     one last generation without tools, then `run.ended` `loop_terminated`

`loop.detected` carries `occurrences` (loopwire's addition, docs/protocol.md): how many times the pattern has
occurred in a row (turns with the same call or answer; repetitions of the cycle).

A turn the ladder redirects or terminates is not persisted: its calls are not executed,
it is left out of the history (as a vacuous answer is) and `retracted` (reason
`loop detected (<detection>): <rung>`), so a client drops its text; `loop.detected`
still reports it, and its signature stays in the window, so the next repetition climbs
the next rung. Repeating the looping turn to the model would only show it its own loop
again. The redirect itself is a *user message* stored in the history, not an ephemeral
note: the repetitions before the looping one are still there, and keeping why the
approach changed lets a switched-to model, and a reader of the transcript, see it. Each
rung that changes course is a `steering` event too (steering.py): `loop_redirect` for
the redirect, `model_switch` for the switch.

A good turn (no stage flagged it) resets the ladder to 0; giving up on a bad answer (a
vacuous answer passed through) does not. A repeated *vacuous* answer is not escalated: it
is passed through as the run's answer (the vacuous stage has already asked for better).
New user input (a follow-up at the outer boundary, a steer) clears the window (not the rung).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from difflib import SequenceMatcher

import orjson

from loopwire.shared.contract.event_fields import Escalation, LoopDetectedFields
from loopwire.shared.contract.messages import ContentBlock, Message
from loopwire.shared.contract.run_state import RunState

from .next_step import EventSpec, NextStep, NextStepConverge, NextStepFinalOutput, NextStepRunAgain
from .stages import Turn, vacuous_problem
from .steering import steering_spec

WINDOW = 8
"""Turns remembered for detection."""
NEAR_IDENTICAL = 0.9
"""Similarity ratio from which two normalised answers count as the same."""
MIN_FUZZY_CHARS = 20
"""Shorter answers must match exactly (after normalisation) to count as the same."""
RAISED_TEMPERATURE_STEP = 0.3
MAX_TEMPERATURE = 1.0
MODEL_DEFAULT_TEMPERATURE = 1.0
"""The Messages API's temperature when a request sets none (its documented default)."""

REDIRECT = ("Loop detected. Please try a different approach: {what} without making progress. "
            "Do not repeat it; change your approach, or give your final answer if you have one.")
TERMINATE = ("Loop detected again: {what}. Stop here. Do not call any tool; give your best "
             "final answer now from what you already know.")

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Lower case; every run of whitespace and punctuation becomes one space; digits stay."""
    return _NON_WORD.sub(" ", text.lower()).strip()


def call_signature(call: ContentBlock) -> str:
    # Canonical JSON (sorted keys, compact, UTF-8): the same bytes as json.dumps(sort_keys=True,
    # separators=(",", ":"), ensure_ascii=False) for JSON input, at a tenth of the cost.
    canonical = orjson.dumps(call.get("input") or {}, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(canonical).hexdigest()[:16]
    return f"tool:{call.get('name', '')}:{digest}"


def turn_signature(tool_calls: list[ContentBlock], text: str) -> list[str]:
    if tool_calls:
        return sorted(call_signature(c) for c in tool_calls)
    return ["text:" + normalise(text)[:500]]


def _is_text(sig: list[str]) -> bool:
    return len(sig) == 1 and sig[0].startswith("text:")


def similar(a: str, b: str) -> bool:
    if a == b:
        return True
    if min(len(a), len(b)) < MIN_FUZZY_CHARS:
        return False
    return SequenceMatcher(None, a, b, autojunk=False).ratio() >= NEAR_IDENTICAL


def detect(window: list[list[str]], repeat_threshold: int = 3, text_repeats: int = 2) -> str | None:
    """The detection the newest turn (`window[-1]`) completes, or None."""
    found = detect_occurrences(window, repeat_threshold, text_repeats)
    return found[0] if found else None


def detect_occurrences(window: list[list[str]], repeat_threshold: int = 3,
                       text_repeats: int = 2) -> tuple[str, int] | None:
    """The detection the newest turn completes and how many times its pattern occurred in
    a row (turns for a repeat, whole repetitions for a cycle), or None."""
    if not window:
        return None
    current = window[-1]
    if _is_text(current):
        run = 0
        for sig in reversed(window):
            if not (_is_text(sig) and similar(sig[0], current[0])):
                break
            run += 1
        if run >= max(2, text_repeats):
            return "repeated_text", run
    else:
        longest = 0
        for call in set(current):
            run = 0
            for sig in reversed(window):
                if call not in sig:
                    break
                run += 1
            longest = max(longest, run)
        if longest >= max(2, repeat_threshold):
            return "repeated_tool_call", longest
    keys = ["|".join(sig) for sig in window]
    for period in (2, 3):
        tail = keys[-2 * period:]
        if len(tail) == 2 * period and tail[:period] == tail[period:] and len(set(tail[:period])) == period:
            repeats = 2
            while keys[-(repeats + 1) * period:-repeats * period] == tail[:period]:
                repeats += 1
            return "alternating_cycle", repeats
    return None


def describe(detection: str) -> str:
    return {
        "repeated_tool_call": "you have made the same tool call with the same input several times",
        "repeated_text": "you have given the same answer several times",
        "alternating_cycle": "you are going round in a cycle of the same steps",
    }.get(detection, "you are repeating yourself")


def next_model(run: RunState) -> str | None:
    models = run.config.models
    return models[run.limits.model_offset + 1] if run.limits.model_offset + 1 < len(models) else None


def raised_temperature(run: RunState) -> float:
    """The run's temperature raised by a step: from the one the ladder or the run set,
    else from the model's default; never past the API's maximum."""
    current = run.limits.temperature if run.limits.temperature is not None else run.config.temperature
    base = MODEL_DEFAULT_TEMPERATURE if current is None else current
    return round(min(MAX_TEMPERATURE, base + RAISED_TEMPERATURE_STEP), 3)


def escalation(level: int) -> Escalation:
    """The rung for the `level`-th detection in a row (0-based)."""
    return ("redirect", "switch_model")[level] if level < 2 else "terminate"


def clear(run: RunState) -> None:
    """New user input: earlier turns answered something else, so they cannot form a loop
    with the next ones. The ladder's rung stays: only a good turn resets it."""
    run.limits.loop_window = []


@dataclass(frozen=True)
class LoopDetectionStage:
    name: str = "loop_detection"

    def after_generation(self, turn: Turn) -> NextStep | None:
        run, cfg = turn.run, turn.config
        run.limits.loop_window = (run.limits.loop_window + [turn_signature(turn.tool_calls, turn.text)])[-WINDOW:]
        found = detect_occurrences(run.limits.loop_window, cfg.loop_repeat_threshold, cfg.loop_text_repeats)
        if found is None:
            return None
        detection, occurrences = found
        turn.flags.add("loop")
        if not turn.tool_calls and vacuous_problem(turn.text, run.last_prompt) is not None:
            # The same empty answer again: asking once more will not help. Pass it through.
            turn.flags.add("vacuous")
            return NextStepFinalOutput(status="completed", text=turn.text, events=(EventSpec(
                "loop.detected", {"detection": detection, "escalation": "terminate", "action": "pass_through",
                                  "occurrences": occurrences}),))
        new_model = next_model(run)
        # The ladder has its switch rung whether or not there is a fallback model, so a run
        # with one model gets a changed attempt before it is terminated: without a
        # fallback the sampling changes instead (raised_temperature).
        rung = escalation(run.limits.loop_level)
        run.limits.loop_level += 1
        what = describe(detection)
        event: LoopDetectedFields = {"detection": detection, "escalation": rung, "occurrences": occurrences}
        dropped = f"loop detected ({detection}): {rung}"
        if rung == "terminate":
            return NextStepConverge(status="loop_terminated", reason=detection, events=(EventSpec("loop.detected", event),),
                                    append=[_user(TERMINATE.format(what=what))], retract=dropped, drop_turn=True)
        if rung == "redirect":
            return NextStepRunAgain(append=[_user(REDIRECT.format(what=what))], reason="loop_redirect",
                                    events=(EventSpec("loop.detected", event),
                                            steering_spec(run, "loop_redirect", reason=detection)),
                                    retract=dropped, drop_turn=True)
        switch: list[EventSpec] = []
        if new_model is not None:
            switch.append(EventSpec("model.fallback", {"from_model": run.config.models[run.limits.model_offset],
                                                       "to_model": new_model, "reason": "loop_detected"}))
            run.limits.model_offset += 1
            event["to_model"] = new_model
        else:
            run.limits.temperature = event["temperature"] = raised_temperature(run)
        switch.append(steering_spec(run, "model_switch", reason="loop_detected", to_model=event.get("to_model"),
                                    temperature=event.get("temperature")))
        return NextStepRunAgain(append=[_user(REDIRECT.format(what=what))], reason="loop_switch_model",
                                events=(EventSpec("loop.detected", event), *switch), retract=dropped, drop_turn=True)


def _user(text: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}]}
