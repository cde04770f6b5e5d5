"""agentic_planned through the router's pure core: a plan generated, tracked and verified;
a prebuilt plan; a text plan parsed; the plan phase's tools."""

from typing import Any

import pytest

from loopwire.router.core import planning
from tests.router_driver import Driver, call
from tests.unit.router.test_profiles import phases

pytestmark = pytest.mark.unit


# -- agentic_planned --------------------------------------------------------------------------
def update_plan(tid: str, *steps: tuple[str, str]) -> dict[str, Any]:
    return call(tid, "update_plan", {"plan": [{"step": s, "status": st} for s, st in steps]})


def test_planned_generated_plan_tracked_then_verified() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="add 1 and 2, then double it", tools=["add", "mul"])
    env = d.work()
    assert d.run.profile_phase == "plan"
    assert env["tools"] == [] and [t["name"] for t in env["extra_tools"]] == ["update_plan"]
    assert any("Phase: plan" in n and "add, mul" in n for n in env["ephemeral_notes"])

    d.answer(update_plan("p1", ("add 1 and 2", "pending"), ("double it", "pending")))
    assert d.work()["kind"] == "memory.assemble", "the plan call is answered by the core: no tool hop"
    assert "Plan recorded (2 steps)" in d.history[-1]["content"][0]["content"]
    assert d.run.profile_phase == "execute"
    env = d.work()
    assert env["tools"] == ["add", "mul"]
    assert [t["name"] for t in env["extra_tools"]] == ["update_plan", "finish_agentic_task"]
    assert any("[pending] add 1 and 2" in n for n in env["ephemeral_notes"])

    out = d.answer(call("t1", "add"), update_plan("p2", ("add 1 and 2", "completed"), ("double it", "pending")))
    assert [c["tool_use_id"] for c in d.work(out)["calls"]] == ["t1"], "update_plan never reaches the tools service"
    d.tools("3")
    assert [b["tool_use_id"] for b in d.history[-1]["content"]] == ["t1", "p2"], "results in the model's order"
    d.answer(call("t2", "mul", {"a": 3, "b": 2}), update_plan("p3", ("add 1 and 2", "completed"),
                                                               ("double it", "completed")))
    assert d.run.profile_phase == "verify"
    d.tools("6")
    assert "verify" in d.history[-1]["content"][1]["content"]
    d.answer("Checked: 1 + 2 = 3, doubled is 6. The answer is 6.")
    ended = d.ended()
    assert ended["status"] == "completed" and ended["final_text"] == "Checked: 1 + 2 = 3, doubled is 6. The answer is 6."
    assert phases(d) == [("init", "plan"), ("plan", "execute"), ("execute", "verify"), ("verify", "done")]
    updates = d.of("plan.updated")
    assert [u["source"] for u in updates] == ["model", "model", "model", "verification"]
    assert updates[-1]["verification"].startswith("Checked")
    assert d.state.plan is not None and d.state.plan["phase"] == "done"
    assert [s["status"] for s in d.state.plan["steps"]] == ["completed", "completed"]


def test_planned_prebuilt_plan_skips_to_execute() -> None:
    d = Driver()
    out = d.start(profile="agentic_planned", input="go", plan=["read", {"title": "write", "status": "done"}])
    assert d.kinds(out)[:4] == ["run.started", "phase.changed", "phase.changed", "plan.updated"]
    assert phases(d) == [("init", "plan"), ("plan", "execute")]
    assert d.run.profile_phase == "execute"
    assert d.run.plan.steps == [{"step": "read", "status": "pending"}, {"step": "write", "status": "completed"}]
    assert d.of("plan.updated")[0]["source"] == "start"


def test_planned_text_plan_is_parsed_and_a_missing_plan_is_asked_for_once() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="do it")
    d.answer("My plan:\n1. look\n2. fix")
    assert d.run.plan.steps == [{"step": "look", "status": "pending"}, {"step": "fix", "status": "pending"}]
    assert d.run.profile_phase == "execute"

    d2 = Driver()
    d2.start(profile="agentic_planned", input="do it")
    d2.answer("Sure thing.")
    assert "update_plan" in d2.history[-1]["content"][0]["text"] and d2.run.profile_phase == "plan"
    d2.answer("Okay then.")
    assert d2.run.plan.steps == [{"step": "do it", "status": "pending"}]
    assert d2.of("plan.updated")[0]["source"] == "fallback"


def test_planned_plan_phase_rejects_other_tools_and_end_of_execute_goes_to_verify() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="x", plan=["only step"])
    d.answer("All done I think.")
    assert "not completed yet: only step" in d.history[-1]["content"][0]["text"], "one nudge"
    assert phases(d)[-1] == ("execute", "execute"), "sent back to carry out the open step"
    d.answer("Really done.")
    assert d.run.profile_phase == "verify"
    d.answer("Verified.")
    assert phases(d) == [("init", "plan"), ("plan", "execute"), ("execute", "execute"), ("execute", "verify"),
                         ("verify", "done")]
    assert d.ended()["final_text"] == "All done I think.\n\nReally done.\n\nVerified."
    d2 = Driver()
    d2.start(profile="agentic_planned", input="x")
    out = d2.answer(call("t1", "add"))
    assert d2.work(out)["denied"] == {"t1": "tool 'add' is not available in the plan phase"}


def test_plan_parsing_shapes() -> None:
    assert planning.parse_plan({"steps": ["a", {"step": "b", "status": "in progress"}]}) == [
        {"step": "a", "status": "pending"}, {"step": "b", "status": "in_progress"}]
    assert planning.parse_plan_text("intro\n- one\n* two\nStep 3: three\nnot a step") == [
        {"step": "one", "status": "pending"}, {"step": "two", "status": "pending"},
        {"step": "three", "status": "pending"}]
    assert planning.parse_plan(42) == []


def test_a_verification_that_restates_the_answer_is_not_a_loop() -> None:
    # VERIFY_REQUEST asks for something new: the same words again are the verification
    # asked for, not a repetition (NextStepRunAgain.new_request clears the loop window).
    d = Driver()
    d.start(profile="agentic_planned", input="x", plan=[{"title": "only step", "status": "done"}])
    d.answer("The file is written.")
    assert d.run.profile_phase == "verify"
    d.answer("The file is written.")
    ended = d.ended()
    assert d.of("loop.detected") == [] and ended["status"] == "completed"
    assert phases(d)[-1] == ("verify", "done")


def test_a_nudge_answered_with_the_same_words_is_still_a_loop() -> None:
    # The open-steps nudge asks again for what the model did not do: the same answer
    # once more is the model not moving, which the ladder redirects.
    d = Driver()
    d.start(profile="agentic_planned", input="x", plan=["only step"])
    d.answer("All done I think.")
    assert phases(d)[-1] == ("execute", "execute")
    d.answer("All done I think.")
    (detected,) = d.of("loop.detected")
    assert detected["detection"] == "repeated_text" and detected["escalation"] == "redirect"
