"""The reserved finish tool, the conclusion's normalised shape, and the plan gate."""

from __future__ import annotations

import pytest

from loopwire.router.core import strategy_loop
from loopwire.router.core.finish import FINISH_SPEC, normalise_conclusion, out_of_budget_conclusion
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}


def finish(tid: str = "f1", **inp: object) -> dict:
    return call(tid, "finish_agentic_task", dict(inp))


def test_the_finish_call_ends_the_run_with_its_input_as_conclusion() -> None:
    d = Driver()
    d.start(input="check the server", tools=["add"])
    out = d.answer("Done.", call("t1"), finish(summary="All good.", confidence=0.9,
                                              findings=[{"action": "raise", "class": "disk", "summary": "90% full"}],
                                              outputs=["a note"]))
    assert [e for e in out.effects if e.type == "work"] == [], "intercepted before any execution"
    ended = d.ended()
    assert ended["status"] == "completed" and ended["final_text"] == "All good."
    c = ended["conclusion"]
    assert c["summary"] == "All good." and c["confidence"] == 0.9
    assert c["classification"] == {"primary": "task_complete", "terminal": "finish"}
    assert c["findings"] == [{"action": "raise", "class": "disk", "summary": "90% full", "severity": None,
                              "key": None, "details": {}}]
    assert c["outputs"] == [{"kind": "output_proposal", "type": "text", "dedupe_key": None, "payload": "a note"}]
    results = d.history[-1]["content"]
    assert results[0]["tool_use_id"] == "t1" and results[0]["is_error"], "the other call is not executed"
    assert results[1] == {"type": "tool_result", "tool_use_id": "f1", "content": "The run is finished."}


def test_finish_beats_loop_detection_and_queued_follow_ups_start_the_next_run() -> None:
    d = Driver()
    d.start(input="x")
    d.message("and then?")
    d.answer(finish(summary="ok"))
    assert d.ended()["conclusion"]["summary"] == "ok"
    assert d.run.run_id == "run1.next", "the follow-up starts the next run; the finished one stays finished"


def test_findings_and_outputs_are_normalised() -> None:
    c = normalise_conclusion({"summary": "s", "confidence": "high",
                              "findings": ["plain", {"status": "resolved", "type": "cpu", "title": "ok now",
                                                     "id": "k1", "host": "a"}],
                              "outputs": {"channel": "slack", "dedupe_key": "d", "text": "hi"}})
    assert c["confidence"] is None
    assert c["findings"][0]["action"] == "raise" and c["findings"][0]["summary"] == "plain"
    assert c["findings"][1] == {"key": "k1", "status": "clear", "reason": "ok now"}, "which one, and why"
    assert c["outputs"] == [{"kind": "output_proposal", "type": "slack", "dedupe_key": "d", "payload": {"text": "hi"}}]
    assert normalise_conclusion("just text")["summary"] == "just text"


@pytest.mark.parametrize(("raw", "cleared"), [
    ({"action": "clear", "key": "var-disk", "reason": "pruned to 40%", "severity": "high"},
     {"key": "var-disk", "status": "clear", "reason": "pruned to 40%"}),
    ({"op": "fixed", "key": "cpu", "summary": "back to normal"}, {"key": "cpu", "status": "clear",
                                                                  "reason": "back to normal"}),
    ({"status": "closed"}, {"key": None, "status": "clear", "reason": ""}),
])
def test_a_cleared_finding_is_its_key_and_its_reason(raw: dict, cleared: dict) -> None:
    assert normalise_conclusion({"summary": "s", "findings": [raw]})["findings"] == [cleared]


def test_out_of_budget_conclusions() -> None:
    by_call = out_of_budget_conclusion({"input": {"summary": "half done"}}, "", "best")
    assert by_call["summary"] == "half done" and by_call["classification"]["terminal"] == "budget_exhausted"
    assert out_of_budget_conclusion(None, "", "best so far")["summary"] == "Out of budget. best so far"


def test_out_of_budget_the_model_may_finish_with_the_only_tool_offered() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 50})
    assert [t["name"] for t in d.work()["extra_tools"]] == ["finish_agentic_task"] and d.work()["tools"] == []
    d.answer(finish(summary="Could not finish: out of budget.", findings=["unchecked"]), usage=(40, 9))
    ended = d.ended()
    assert ended["status"] == "budget_exhausted" and ended["final_text"] == "Could not finish: out of budget."
    assert ended["conclusion"]["classification"] == {"primary": "incomplete", "terminal": "budget_exhausted"}
    assert ended["conclusion"]["findings"][0]["summary"] == "unchecked"


def test_finish_spec_is_a_valid_schema_and_not_offered_in_turn_by_turn() -> None:
    assert strategy_loop.schema_problem(FINISH_SPEC.input_schema, {"summary": "x"}) is None
    assert strategy_loop.schema_problem(FINISH_SPEC.input_schema, {}) is not None
    d = Driver()
    d.start(input="x", profile="turn_by_turn")
    assert d.work()["extra_tools"] == []


# -- the plan gate ------------------------------------------------------------------------------
def test_the_plan_gate_rejects_invalid_input_before_anything_runs() -> None:
    d = Driver()
    d.start(input="add", tools=["add", "rm"], tool_permissions={"rm": "deny"})
    out = d.answer(call("t1", "add", {"a": 1}), call("t2", "add", {"a": 1, "b": 2}), call("t3", "rm"),
                   call("t4", "ls"), schemas={"add": ADD_SCHEMA})
    denied = d.work(out)["denied"]
    assert denied == {"t1": "invalid input for tool add: 'b' is a required property",
                      "t3": "tool 'rm' is denied by the run's tool_permissions",
                      "t4": "tool 'ls' is not available in this run"}
    assert [c["tool_use_id"] for c in d.work(out)["calls"]] == ["t1", "t2", "t3", "t4"]


def test_a_rejected_approve_call_is_never_asked_about() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"add": "approve"})
    out = d.answer(call("t1", "add", {"a": "one"}), schemas={"add": ADD_SCHEMA})
    assert d.of("approval.requested") == [], "invalid input: nothing to approve"
    assert "invalid input for tool add" in d.work(out)["denied"]["t1"]


def test_schema_problem_tolerates_a_broken_schema() -> None:
    assert strategy_loop.schema_problem({"type": "no-such-type"}, {}) is None


OWN_FINISH = {"description": "Report the ticket's resolution.",
              "input_schema": {"type": "object", "properties": {"ticket": {"type": "string"},
                                                                "resolution": {"type": "string"}},
                               "required": ["ticket", "resolution"]}}


def test_finish_false_leaves_the_tool_out_and_a_call_of_it_is_not_offered() -> None:
    d = Driver()
    d.start(input="check the server", tools=["add"], finish=False)
    assert [t["name"] for t in d.work()["extra_tools"]] == []
    assert d.run.config.finish is False and not d.run.config.conclusion
    out = d.answer(finish(summary="sneaky"))
    assert list(d.work(out)["denied"]) == ["f1"], "refused by the plan gate, not taken as a finish"
    assert d.state.status == "running"
    d.tools("denied", is_error=True)
    d.answer("The server is fine.")
    assert d.ended()["status"] == "completed" and d.ended()["conclusion"] is None


def test_the_applications_own_finish_tool_is_offered_and_its_input_is_the_conclusion_as_given() -> None:
    d = Driver()
    d.start(input="close ticket 7", tools=["add"], finish=OWN_FINISH)
    (offered,) = d.work()["extra_tools"]
    assert offered == {"name": "finish_agentic_task", **OWN_FINISH}
    out = d.answer("Closing.", finish(ticket="T-7", resolution="rebooted"))
    assert [e for e in out.effects if e.type == "work"] == [], "intercepted, never sent to a provider"
    ended = d.ended()
    assert ended["status"] == "completed"
    assert ended["conclusion"] == {"ticket": "T-7", "resolution": "rebooted"}, "not normalised to the built-in shape"
    assert ended["final_text"] == "Closing."
    d2 = Driver()
    d2.start(input="x", tools=["add"], finish=OWN_FINISH)
    d2.answer(finish(ticket="T-8", resolution="done", summary="Ticket 8 closed."))
    assert d2.ended()["final_text"] == "Ticket 8 closed.", "a string `summary` in it is the closing answer"


def test_the_start_says_over_the_strategy_and_a_bad_declaration_is_refused() -> None:
    from loopwire.router.core import inputs as i
    from loopwire.router.core.strategy import StrategyConfig
    from loopwire.shared.contract.protocol import StartRun
    strategy = StrategyConfig(actor="ops", finish=False)
    d = Driver()
    d.apply(i.StartInput(input_id="in:1", new_id="run1", strategy=strategy.model_dump(mode="json"), body=StartRun(
        input="x", tools=["add"], finish=OWN_FINISH, strategy={"actor": "ops"})))
    assert d.run.config.finish and d.run.config.finish_tool == OWN_FINISH
    d2 = Driver()
    d2.apply(i.StartInput(input_id="in:1", new_id="run1", strategy=strategy.model_dump(mode="json"), body=StartRun(
        input="x", tools=["add"], strategy={"actor": "ops"})))
    assert d2.run.config.finish is False, "the strategy's word when the start says nothing"
    with pytest.raises(ValueError, match="type"):
        StartRun.model_validate({"input": "x", "finish": {"description": "d", "input_schema": {"type": "string"}}})
