"""Tool permissions and durable approval checkpoints, through the router's pure core."""

from __future__ import annotations

import pytest

from loopwire.shared.contract.session_state import SessionState
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def approval_of(d: Driver) -> dict:
    (fields,) = d.of("approval.requested")
    return fields


def test_an_approve_tool_is_held_at_a_checkpoint_and_the_session_is_paused() -> None:
    d = Driver()
    d.start(input="clean up", tool_permissions={"rm": "approve"})
    out = d.answer("Removing.", call("t1", "rm", {"path": "/tmp/x"}))
    assert d.kinds(out) == ["message", "tool.call", "approval.requested"]
    fields = approval_of(d)
    assert fields["tool_calls"] == [{"tool_use_id": "t1", "name": "rm", "input": {"path": "/tmp/x"}}]
    assert d.state.status == "awaiting_approval"
    assert d.run.approvals.checkpoint is not None and d.run.approvals.checkpoint.id == fields["checkpoint_id"]
    assert d.run.pending_step is None, "nothing is in flight: no process holds the run"
    assert [e for e in out.effects if e.type == "work"] == [], "nothing is sent to the tools service"
    # The pause survives a reload from JSON (what Redis holds): nothing lives in memory.
    assert SessionState.load(d.state.dump(), "s1") == d.state


def test_approve_executes_exactly_the_stored_calls_without_a_model_call() -> None:
    d = Driver()
    d.start(input="clean up", tool_permissions={"rm": "approve"})
    d.answer("Removing.", call("t1", "rm", {"path": "/tmp/x"}))
    cid = approval_of(d)["checkpoint_id"]
    d.state = SessionState.load(d.state.dump(), "s1")  # a restarted router reads it back
    out = d.decision(cid, "approve")
    assert d.of("approval.decided", out) == [{"checkpoint_id": cid, "decision": "approve"}], \
        "the transcript keeps the decision; nothing else is said until the tools answer"
    env = d.work(out)
    assert env["kind"] == "tools.execute"
    assert env["calls"] == [{"tool_use_id": "t1", "name": "rm", "input": {"path": "/tmp/x"}, "depends_on": []}]
    assert env["denied"] == {}
    assert d.state.status == "running"
    d.tools("removed")
    assert d.work()["kind"] == "memory.assemble"
    assert d.history[-1]["content"][0]["content"] == "removed"


def test_deny_gives_the_model_error_results_and_the_loop_goes_on() -> None:
    d = Driver()
    d.start(input="clean up", tool_permissions={"rm": "approve"})
    d.answer("Removing.", call("t1", "rm"))
    out = d.decision(approval_of(d)["checkpoint_id"], "deny", note="too risky")
    assert d.of("approval.decided", out)[0]["note"] == "too risky"
    env = d.work(out)
    assert env["kind"] == "tools.execute" and env["denied"] == {"t1": "denied by the user: too risky"}
    d.tools("tool rm was not run: denied by the user: too risky", is_error=True)
    assert d.work()["kind"] == "memory.assemble", "the model continues"
    d.answer("OK, I left it.")
    assert d.ended()["status"] == "completed"


def test_auto_calls_wait_with_the_approve_calls_and_results_go_back_in_one_message() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "add"), call("t2", "rm"), call("t3", "add", {"a": 5, "b": 5}))
    fields = approval_of(d)
    assert [c["tool_use_id"] for c in fields["tool_calls"]] == ["t2"], "the decision is about rm only"
    out = d.decision(fields["checkpoint_id"], "deny")
    env = d.work(out)
    assert [c["tool_use_id"] for c in env["calls"]] == ["t1", "t2", "t3"], "one batch, the model's order"
    assert env["denied"] == {"t2": "denied by the user: no reason given"}
    d.tools("ok")
    assert [b["tool_use_id"] for b in d.history[-1]["content"]] == ["t1", "t2", "t3"]


def test_a_decision_for_an_unknown_or_answered_checkpoint_changes_nothing() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "rm"))
    cid = approval_of(d)["checkpoint_id"]
    wrong = d.decision("nope", "approve")
    assert wrong.state is None and d.of("error", wrong)[0]["code"] == "unknown_checkpoint"
    assert d.state.status == "awaiting_approval"
    d.decision(cid, "approve")
    again = d.decision(cid, "deny")
    assert again.state is None and d.kinds(again) == ["error"]
    assert d.of("error", again)[0]["code"] == "unknown_checkpoint"


def test_a_redelivered_decision_replays_its_outbox_and_nothing_else() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "rm"))
    inp_id = "in:dup"
    from loopwire.router.core import inputs as i
    from loopwire.shared.contract.protocol import ApprovalDecision
    inp = i.DecisionInput(input_id=inp_id, body=ApprovalDecision(checkpoint_id=approval_of(d)["checkpoint_id"],
                                                               decision="approve"))
    first = d.apply(inp)
    again = d.apply(inp)
    assert again.replay and again.state is None
    assert [e.model_dump() for e in again.effects] == [e.model_dump() for e in first.effects]


def test_deny_permission_never_reaches_a_provider_and_needs_no_decision() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "deny"})
    out = d.answer(call("t1", "rm"))
    assert d.of("approval.requested") == []
    assert d.work(out)["denied"] == {"t1": "tool 'rm' is denied by the run's tool_permissions"}


def test_abort_while_awaiting_approval_ends_the_run_with_a_valid_history() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "rm"))
    d.abort("no")
    assert d.ended()["status"] == "aborted" and d.state.status == "idle"
    assert d.history[-1]["content"][0]["tool_use_id"] == "t1" and d.history[-1]["content"][0]["is_error"]
    late = d.decision(approval_of(d)["checkpoint_id"])
    assert d.of("error", late)[0]["code"] == "unknown_checkpoint"


def test_steer_while_awaiting_approval_withdraws_the_checkpoint() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "rm"))
    d.steer("never mind")
    assert d.state.status == "running" and d.run.approvals.checkpoint is None
    assert d.work()["kind"] == "memory.assemble"
    user = d.history[-1]["content"]
    assert user[0]["tool_use_id"] == "t1" and "steering" in user[0]["content"]
    assert user[-1] == {"type": "text", "text": "never mind"}


def test_a_follow_up_while_awaiting_approval_is_queued() -> None:
    d = Driver()
    d.start(input="x", tool_permissions={"rm": "approve"})
    d.answer(call("t1", "rm"))
    d.message("also this")
    assert d.state.status == "awaiting_approval" and d.state.queued
    busy = d.start(run_id="run2", input="again")
    assert d.of("error", busy)[0]["code"] == "session_busy"
