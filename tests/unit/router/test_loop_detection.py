"""Loop detection (repeated calls, repeated text, short cycles) and its escalation ladder:
redirect, switch model (or raise the temperature), terminate; reset rules."""

from __future__ import annotations

import pytest

from loopwire.router.core.config import CoreConfig
from loopwire.router.core.loop_detection import (
    REDIRECT,
    call_signature,
    detect,
    detect_occurrences,
    escalation,
    normalise,
    similar,
    turn_signature,
)
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit


def sig(name: str, **inp: int) -> list[str]:
    return turn_signature([{"name": name, "input": inp}], "")


def text_sig(value: str) -> list[str]:
    return turn_signature([], value)


# -- the detectors ------------------------------------------------------------------------------
def test_normalise_collapses_case_whitespace_and_punctuation_but_keeps_digits() -> None:
    assert normalise("  Hello,   WORLD!!  It's 42.\n") == "hello world it s 42"
    assert normalise("...!?") == ""
    assert normalise("v1.2") != normalise("v12"), "digits are kept apart"


def test_call_signature_ignores_key_order_but_not_values() -> None:
    assert call_signature({"name": "a", "input": {"x": 1, "y": 2}}) == \
        call_signature({"name": "a", "input": {"y": 2, "x": 1}})
    assert call_signature({"name": "a", "input": {"x": 1}}) != call_signature({"name": "a", "input": {"x": 2}})
    assert call_signature({"name": "a", "input": {"x": 1}}) != call_signature({"name": "b", "input": {"x": 1}})


def test_repeated_tool_call_needs_threshold_consecutive_turns() -> None:
    a = sig("search", q=1)
    assert detect([a, a], repeat_threshold=3) is None
    assert detect([a, a, a], repeat_threshold=3) == "repeated_tool_call"
    assert detect([a, sig("other"), a, a], repeat_threshold=3) is None, "an interruption resets the count"
    both = sorted(a + sig("other"))
    assert detect([a, both, a], repeat_threshold=3) == "repeated_tool_call", "one call repeated among others"


def test_repeated_text_is_near_identical_after_normalisation() -> None:
    assert detect([text_sig("Let me check."), text_sig("let me CHECK!")], text_repeats=2) == "repeated_text"
    assert detect([text_sig("yes"), text_sig("no")], text_repeats=2) is None
    long_a = "The answer depends on the configuration of the cluster and its nodes."
    long_b = "The answer depends on the configuration of the cluster and its node."
    assert similar(normalise(long_a), normalise(long_b))
    assert detect([text_sig(long_a), text_sig(long_b)]) == "repeated_text"
    assert detect([text_sig("It is 41."), text_sig("It is 42.")]) is None, "short texts must match exactly"


def test_alternating_cycles_of_two_and_three() -> None:
    a, b, c = sig("a"), sig("b"), sig("c")
    assert detect([a, b, a]) is None
    assert detect([a, b, a, b]) == "alternating_cycle"
    assert detect([a, b, c, a, b, c]) == "alternating_cycle"
    assert detect([a, b, c, a, b, a]) is None


def test_escalation_ladder_rungs() -> None:
    assert [escalation(n) for n in range(4)] == ["redirect", "switch_model", "terminate", "terminate"]


def test_occurrences_count_the_pattern_in_a_row() -> None:
    a, b, c = sig("a"), sig("b"), sig("c")
    assert detect_occurrences([c, a, a, a]) == ("repeated_tool_call", 3)
    assert detect_occurrences([a, a, a, a, a]) == ("repeated_tool_call", 5)
    assert detect_occurrences([text_sig("Same."), text_sig("same"), text_sig("SAME!")]) == ("repeated_text", 3)
    assert detect_occurrences([a, b, a, b]) == ("alternating_cycle", 2)
    assert detect_occurrences([a, b, a, b, a, b]) == ("alternating_cycle", 3)
    assert detect_occurrences([a, b, c, a, b, c]) == ("alternating_cycle", 2)


# -- the ladder in the core ---------------------------------------------------------------------------
def loop_once(d: Driver, tid: str) -> None:
    d.answer("Checking.", call(tid))


def loop_to_redirect(d: Driver) -> None:
    """The same call three times (t1, t2 executed; t3 detected and redirected)."""
    for n in (1, 2):
        loop_once(d, f"t{n}")
        d.tools()
    loop_once(d, "t3")


def test_a_repeated_call_is_redirected_then_the_model_switched_then_the_run_terminated() -> None:
    d = Driver()
    d.start(input="add 1 and 2", model={"primary": "m1", "fallbacks": ["m2"]})
    loop_to_redirect(d)
    redirect = d.of("loop.detected")[-1]
    assert redirect == {"detection": "repeated_tool_call", "escalation": "redirect", "occurrences": 3}
    assert d.work()["kind"] == "memory.assemble", "the looping call is not executed"
    assert d.of("retracted")[-1] == {"turn": 3, "reason": "loop detected (repeated_tool_call): redirect"}
    assert d.history[-1] == {"role": "user", "content": [{"type": "text", "text": REDIRECT.format(
        what="you have made the same tool call with the same input several times")}]}
    assert d.history[-2]["content"][0]["tool_use_id"] == "t2", "the looping turn is not in the history"
    assert d.of("steering") == [{"source": "loop_redirect", "turn": 3, "reason": "repeated_tool_call"}]
    assert d.work()["history_len"] == len(d.history)

    loop_once(d, "t4")
    assert d.of("loop.detected")[-1] == {"detection": "repeated_tool_call", "escalation": "switch_model",
                                         "occurrences": 4, "to_model": "m2"}
    assert d.of("model.fallback")[-1] == {"from_model": "m1", "to_model": "m2", "reason": "loop_detected"}
    assert d.of("steering")[-1] == {"source": "model_switch", "turn": 4, "reason": "loop_detected",
                                    "to_model": "m2"}
    assert d.work()["models"] == ["m2"]

    loop_once(d, "t5")
    assert d.of("loop.detected")[-1]["escalation"] == "terminate"
    assert [r["reason"] for r in d.of("retracted")] == [
        f"loop detected (repeated_tool_call): {rung}" for rung in ("redirect", "switch_model", "terminate")]
    assert not [b for m in d.history for b in m["content"] if b.get("id") in ("t3", "t4", "t5")], \
        "no looping turn was kept"
    assert len(d.of("steering")) == 2, "terminating is no change of course"
    last = d.work()
    assert last["offer_tools"] is False and d.run.limits.converging == "loop_terminated"
    d.answer("I could not get further than 3.", model="m2")
    ended = d.ended()
    assert ended["status"] == "loop_terminated" and ended["reason"] == "repeated_tool_call"
    assert ended["final_text"] == "I could not get further than 3."


def test_without_a_fallback_the_temperature_is_raised_when_it_can_be() -> None:
    d = Driver()
    d.start(input="add 1 and 2", model={"temperature": 0.2})
    loop_to_redirect(d)
    loop_once(d, "t4")
    event = d.of("loop.detected")[-1]
    assert event["escalation"] == "switch_model" and event["temperature"] == 0.5
    assert d.work()["temperature"] == 0.5


def test_without_fallback_or_temperature_the_temperature_rises_from_the_models_default() -> None:
    # The switch rung is there without a fallback model too; an unset
    # temperature is the API's default (1.0, its maximum), made explicit.
    d = Driver()
    d.start(input="add 1 and 2")
    loop_to_redirect(d)
    loop_once(d, "t4")
    assert [e["escalation"] for e in d.of("loop.detected")] == ["redirect", "switch_model"]
    assert d.of("loop.detected")[-1]["temperature"] == 1.0 and d.work()["temperature"] == 1.0
    assert d.of("steering")[-1] == {"source": "model_switch", "turn": 4, "reason": "loop_detected",
                                    "temperature": 1.0}
    assert d.history[-1]["content"][-1]["text"].startswith("Loop detected. Please try a different approach")
    loop_once(d, "t5")
    assert d.of("loop.detected")[-1]["escalation"] == "terminate" and d.run.limits.converging == "loop_terminated"


def test_a_raised_temperature_rises_again_from_where_the_ladder_left_it() -> None:
    d = Driver()
    d.start(input="add 1 and 2", model={"temperature": 0.1})
    loop_to_redirect(d)
    loop_once(d, "t4")
    assert d.run.limits.temperature == 0.4
    d.answer("Trying something else.", call("t5", "mul"))  # a good turn: the ladder starts again
    d.tools()
    for n in (6, 7):
        loop_once(d, f"t{n}")
        d.tools()
    loop_once(d, "t8")
    loop_once(d, "t9")
    assert [e["escalation"] for e in d.of("loop.detected")][-2:] == ["redirect", "switch_model"]
    assert d.work()["temperature"] == 0.7


def test_a_good_turn_resets_the_ladder() -> None:
    d = Driver()
    d.start(input="add 1 and 2", model={"fallbacks": ["m2"]})
    loop_to_redirect(d)
    assert d.run.limits.loop_level == 1
    d.answer("Trying something else.", call("t4", "mul"))
    assert d.run.limits.loop_level == 0, "a different call is a good turn"
    d.tools()
    for n in (5, 6):
        loop_once(d, f"t{n}")
        d.tools()
    loop_once(d, "t7")
    assert d.of("loop.detected")[-1]["escalation"] == "redirect", "the ladder starts again at the bottom"


def test_a_vacuous_answer_passed_through_does_not_reset_the_ladder() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", vacuous_max_retries=0))
    d.start(input="add 1 and 2", model={"fallbacks": ["m2"]})
    loop_to_redirect(d)
    assert d.run.limits.loop_level == 1
    d.message("and then?")  # a follow-up keeps the run going past the weak answer
    d.answer("...")
    assert d.of("run.ended") == [] and d.history[-2]["content"] == [{"type": "text", "text": "..."}]
    assert d.run.limits.loop_level == 1, "giving up on a bad answer is not a good turn"
    d.answer("Let me multiply instead.", call("t4", "mul"))
    assert d.run.limits.loop_level == 0, "a good turn does"


def test_repeated_text_after_a_nudge_is_redirected_with_a_user_message() -> None:
    d = Driver()
    d.start(input="what is the weather in Paris?")
    d.answer("Let me check the weather.")
    assert d.history[-1]["role"] == "user", "the commitment nudge"
    d.answer("Let me check the weather!")
    assert d.of("loop.detected")[-1] == {"detection": "repeated_text", "escalation": "redirect", "occurrences": 2}
    assert d.history[-1]["content"][-1]["text"] == REDIRECT.format(
        what="you have given the same answer several times")


def test_a_repeated_vacuous_answer_is_passed_through() -> None:
    d = Driver()
    d.start(input="hello")
    d.answer(".")
    assert d.of("retracted"), "the first '.' is retracted and retried"
    d.answer(".")
    assert d.of("loop.detected")[-1] == {"detection": "repeated_text", "escalation": "terminate",
                                         "action": "pass_through", "occurrences": 2}
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "."


def test_new_user_input_clears_the_window() -> None:
    d = Driver()
    d.start(input="say ok")
    d.message("again please")
    d.answer("OK.")
    assert d.run.limits.loop_window == [], "the follow-up was taken: earlier turns answered something else"
    d.answer("OK.")
    assert d.of("loop.detected") == []


def test_call_signatures_are_those_of_canonical_json() -> None:
    # Signatures stored by an earlier version (json.dumps) still match after an upgrade.
    import hashlib
    import json

    from loopwire.router.core.loop_detection import call_signature

    call = {"name": "add", "input": {"b": 2.5, "a": [1, "é", None, True], "z": {"y": 1, "x": "\u2028"}}}
    canonical = json.dumps(call["input"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert call_signature(call) == f"tool:add:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
