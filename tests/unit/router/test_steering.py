"""Steering, abort, follow-ups at the outer boundary, and the iteration limits."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.config import CoreConfig
from loopwire.router.core.follow_ups import STEERED_GENERATION
from loopwire.shared.contract.envelopes import GenerationResult
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit


def test_steer_mid_generation_abandons_it_retracts_and_generates_again() -> None:
    d = Driver()
    d.start(input="write a poem")
    abandoned = d.pending
    steered = d.steer("make it about cats")
    assert d.kinds(steered) == ["retracted", "steering", "user.message"]
    assert d.of("retracted", steered)[0] == {"turn": 1, "reason": STEERED_GENERATION}
    assert d.of("steering", steered) == [{"source": "priority_queue", "turn": 0, "interrupted": "generation"}]
    (notice,) = d.notices(steered)
    assert notice.notice == "cancel" and notice.body == {"run_id": "run1"}
    kinds = [e.type for e in steered.effects]
    assert kinds.index("notice") < kinds.index("work"), "the cancel goes out before the new work"
    assert d.history[-1] == {"role": "user", "content": [{"type": "text", "text": "make it about cats"}]}
    assert d.pending != abandoned and d.work()["history_len"] == 2
    assert [c.name for c in steered.counts] == ["steer"]
    late = d.apply(i.GenerationInput(input_id=abandoned, result=GenerationResult(
        session_id="s1", run_id="run1", step_id=abandoned, message={"role": "assistant", "content": []})))
    assert late.state is None and late.effects == [], "the abandoned step's late result is stale"
    d.answer("Cats purr.")
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "Cats purr."


def test_steer_mid_tools_cancels_the_calls_with_valid_results_and_goes_on() -> None:
    d = Driver()
    d.start(input="echo slowly")
    d.answer("Echoing.", call("t1", "slow_echo", {"text": "x"}), call("t2", "add"))
    tools_step = d.pending
    steered = d.steer("never mind, just say hi")
    assert d.kinds(steered) == ["steering", "user.message"], "no retraction: no text was in flight"
    assert d.of("steering", steered)[0]["interrupted"] == "tools", "the design's cancel_executing"
    assert len(d.notices(steered)) == 1
    content = d.history[-1]["content"]
    assert [b.get("tool_use_id") for b in content[:2]] == ["t1", "t2"]
    assert all(b["is_error"] and "steering" in b["content"] for b in content[:2])
    assert content[2] == {"type": "text", "text": "never mind, just say hi"}
    assert d.work()["kind"] == "memory.assemble" and d.pending != tools_step
    assert d.run.last_prompt == "never mind, just say hi"


def test_steer_on_an_idle_session_starts_a_run() -> None:
    d = Driver()
    d.start(input="hi")
    d.answer("Hello.")
    d.steer("and now?")
    assert d.run.run_id == "steered" and d.kinds()[-3:] == ["run.started", "phase.changed", "user.message"]


def test_abort_sends_a_cancel_notice_and_ends_aborted() -> None:
    d = Driver()
    d.start(input="echo slowly")
    d.answer("Echoing.", call("t1", "slow_echo", {"text": "x"}))
    aborted = d.abort("user said stop")
    (notice,) = d.notices(aborted)
    assert notice.body == {"run_id": "run1"}
    assert d.ended()["status"] == "aborted" and d.ended()["reason"] == "user said stop"
    assert d.history[-1]["content"][0]["tool_use_id"] == "t1", "no dangling tool_use"


def test_abort_keeps_the_queued_follow_up_which_starts_the_next_run() -> None:
    d = Driver()
    d.start(input="echo slowly")
    d.answer("Echoing.", call("t1", "slow_echo", {"text": "x"}))
    d.message("then tell me a joke")
    aborted = d.abort("user said stop")
    kinds = d.kinds(aborted)
    assert kinds.index("run.ended") < kinds.index("run.started"), kinds
    assert d.ended()["status"] == "aborted"
    assert d.run.run_id != "run1" and d.state.queued == []
    assert d.history[-1] == {"role": "user", "content": [{"type": "text", "text": "then tell me a joke"}]}
    assert d.work(aborted)["kind"] == "memory.assemble"
    d.answer("Why did the chicken...")
    assert d.of("run.ended")[-1]["status"] == "completed"


def test_follow_ups_are_taken_at_the_outer_boundary_up_to_the_outer_limit() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", max_outer_iterations=2))
    d.start(input="hi")
    d.message("second question")
    d.answer("Answer one.")
    assert d.run.limits.outer == 2 and d.run.limits.inner == 0 and d.of("run.ended") == []
    d.message("third question")
    d.answer("Answer two.")
    ended = d.ended()
    assert ended["status"] == "max_turns" and ended["reason"] == "max_outer_iterations"
    assert ended["final_text"] == "Answer one.\n\nAnswer two.", "the run's answers, in order, before the cap"
    assert ended["conclusion"]["summary"] == ("Stopped at the limit of follow-ups taken in one run "
                                              "(max_outer_iterations). Answer one.\n\nAnswer two.")
    assert d.of("steering") == [{"source": "follow_up_queue", "turn": 1, "messages": 1}], \
        "taken once; the second stays queued for the next run"
    assert d.run.run_id == "run1.next", "the follow-up past the limit starts the next run"
    assert d.history[-1]["content"] == [{"type": "text", "text": "third question"}]


def test_the_inner_cap_counts_tool_rounds_and_the_last_round_still_runs() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", max_inner_iterations=2))
    d.start(input="add numbers")
    d.answer("Hmm.", stop="pause_turn")  # a generation without a tool round does not count
    d.answer(call("t1", inp={"a": 1, "b": 1}))
    d.tools()
    assert d.run.limits.inner == 1
    d.answer("More.", call("t2", inp={"a": 2, "b": 2}))
    assert d.work()["kind"] == "tools.execute" and d.of("run.ended") == [], "the round at the cap runs"
    d.tools("4")
    ended = d.ended()
    assert ended["status"] == "max_turns" and ended["reason"] == "max_inner_iterations"
    assert ended["final_text"] == "More."
    assert d.history[-1]["content"][0] == {"type": "tool_result", "tool_use_id": "t2", "content": "4"}, \
        "its results reach the history"
    assert ended["conclusion"]["executed"] == [{"tool": "add", "calls": 2, "ok": 2, "error": 0}]


def test_max_turns_reason() -> None:
    d = Driver()
    d.start(input="add numbers", limits={"max_turns": 1})
    d.answer("Working.", call("t1"))
    d.tools()
    assert d.ended()["status"] == "max_turns" and d.ended()["reason"] == "max_turns"


def test_a_run_again_at_max_turns_ends_the_run() -> None:
    d = Driver()
    d.start(input="hello", limits={"max_turns": 1})
    d.answer("Let me think", stop="pause_turn")
    assert d.ended()["status"] == "max_turns" and d.ended()["final_text"] == "Let me think"


def test_message_follow_up_during_tools_waits_for_the_boundary() -> None:
    d = Driver()
    d.start(input="add 1 and 2")
    d.answer(call("t1"))
    queued = d.message("also 3 + 4")
    assert queued.effects == [] and d.state.queued
    d.tools()
    assert d.history[-1]["content"][0]["type"] == "tool_result" and len(d.history[-1]["content"]) == 1


def test_a_result_after_the_stall_limit_ends_the_run_as_the_watchdog_would() -> None:
    # After an outage longer than the tolerance, the step's result and the watchdog race:
    # the result that comes first must end the run the same way (failed, undeliverable).
    from loopwire.shared.contract.envelopes import Usage
    from loopwire.shared.contract.protocol import StartRun
    second = 1_000_000_000
    for late_s, status in ((11, "failed"), (9, None)):
        d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", default_max_tokens=1000, stall_after_s=10.0))
        start = i.StartInput(input_id="in:1", new_id="run1", body=StartRun(input="hi"), now_ns=100 * second)
        d.apply(start)
        assert d.state.changed_ns == 100 * second
        step = d.pending
        d.apply(i.GenerationInput(input_id=step, now_ns=(100 + late_s) * second, result=GenerationResult(
            session_id="s1", run_id="run1", step_id=step, message={"role": "assistant", "content": [
                {"type": "text", "text": "Hello."}]}, stop_reason="end_turn", model="m1", usage=Usage())))
        if status is None:
            assert d.ended()["status"] == "completed", "within the limit: the result is the run's"
        else:
            ended = d.ended()
            assert (ended["status"], ended["reason"]) == ("failed", "undeliverable")
            assert d.state.status == "idle"


def test_a_run_narrows_its_loop_with_its_limits_and_the_operators_caps_stay_the_ceiling() -> None:
    # The request's inner cap, below the operator's 3: the run stops after its round.
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", max_inner_iterations=3))
    d.start(input="add numbers", limits={"max_inner_iterations": 1, "progress_injection": "none"})
    d.answer(call("t1", inp={"a": 1, "b": 1}))
    d.tools()
    ended = d.ended()
    assert (ended["status"], ended["reason"]) == ("max_turns", "max_inner_iterations")
    # Above it: held to the operator's 3, and the start is told so.
    d2 = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", max_inner_iterations=3))
    d2.start(input="add numbers", limits={"max_inner_iterations": 50, "max_outer_iterations": 1})
    assert d2.run.config.max_inner_iterations == 3 and d2.run.config.max_outer_iterations == 1
    (warning,) = d2.of("warning")
    assert warning["code"] == "limit_above_ceiling" and warning["limits"] == ["max_inner_iterations"]
    # progress_injection: `none` keeps the reminder out of the next generation.
    for mode, expected in (("none", 0), ("system_reminder", 1)):
        d3 = Driver()
        d3.start(input="add numbers", profile="agentic", limits={"progress_injection": mode})
        d3.answer(call("t1", inp={"a": 1, "b": 1}))
        d3.tools()
        assert sum("Progress:" in n for n in d3.work()["ephemeral_notes"]) == expected, mode


def test_bad_loop_limits_are_refused() -> None:
    from pydantic import ValidationError

    from loopwire.shared.contract.protocol import StartRun
    for limits in ({"max_inner_iterations": 0}, {"max_outer_iterations": -1}, {"progress_injection": "loud"},
                   {"max_inner_iterations": "5"}):
        with pytest.raises(ValidationError):
            StartRun.model_validate({"input": "x", "limits": limits})
