"""The router emits every call's `tool.result` (call_reports.py): as each call of a batch of
several finishes (ToolCallFinished), and the rest with the batch's result."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, Decision, decide
from loopwire.router.core.effects import EmitEvent, PublishWork
from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ToolCallFinished, ToolResultItem, ToolsResult
from loopwire.shared.contract.protocol import Abort, FollowUp, StartRun
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from .test_core import gen_result, tool_use

pytestmark = pytest.mark.unit

CFG = CoreConfig(default_model="claude-sonnet-4-5", default_max_tokens=1000)
CALLS = ("t1", "t2", "t3")


def item(tid: str) -> ToolResultItem:
    return ToolResultItem(tool_use_id=tid, name="add", content=f"result of {tid}")


def finished(step_id: str, tid: str, *, run_id: str = "run1", total: int = 3) -> i.CallFinishedInput:
    return i.CallFinishedInput(input_id=message_ids.call_finished_msg_id(step_id, tid), report=ToolCallFinished(
        session_id="s1", run_id=run_id, step_id=step_id, turn=1, result=item(tid), total=total))


def batch_result(step_id: str, tids: tuple[str, ...] = CALLS, *, reported: bool = False) -> i.ToolsInput:
    return i.ToolsInput(input_id=step_id, result=ToolsResult(
        session_id="s1", run_id="run1", step_id=step_id, turn=1, results=[item(t) for t in tids],
        results_reported=reported))


def decided(state: SessionState, inp: i.BaseInput) -> Decision:
    before = state.dump_json()
    d = decide(state, inp, CFG)
    assert state.dump_json() == before, "decide changed the state it was given"
    return d


def reported(d: Decision) -> list[tuple[str, Any, Any]]:
    """(kind, tool_use_id of a tool.result / completed of a tools.progress, total) of each event."""
    out = []
    for e in d.effects:
        if isinstance(e, EmitEvent) and e.kind == "tool.result":
            out.append((e.kind, e.fields["tool_use_id"], e.fields["turn"]))
        elif isinstance(e, EmitEvent) and e.kind == "tools.progress":
            out.append((e.kind, e.fields["completed"], e.fields["total"]))
    return out


def events_of(tid: str, completed: int, total: int = 3) -> list[tuple[str, Any, Any]]:
    return [("tool.result", tid, 1), ("tools.progress", completed, total)]


def run_of(st: SessionState) -> RunState:
    assert st.run is not None
    return st.run


@pytest.fixture
def in_batch() -> tuple[SessionState, str]:
    """A run waiting for the results of three calls, and the tools step's id."""
    st = SessionState(session_id="s1")
    st = decided(st, i.StartInput(input_id="in:1", new_id="run1", body=StartRun(input="add"))).state
    assert st is not None
    d = decided(st, gen_result("run1:g1", [tool_use(t) for t in CALLS], stop="tool_use"))
    assert d.state is not None
    (w,) = [e for e in d.effects if isinstance(e, PublishWork)]
    return d.state, w.envelope["step_id"]


def test_each_finished_call_is_reported_once_in_finishing_order(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    d = decided(st, finished(step_id, "t2"))
    assert d.state is not None and reported(d) == events_of("t2", 1)
    assert d.effects[0] == EmitEvent(kind="tool.result", key=message_ids.tool_result_key("t2"), run_id="run1",
                                     fields=item("t2").event_fields(1))
    assert d.effects[1].key == message_ids.event_key("tools.progress", "t2")  # type: ignore[union-attr]
    assert len(d.effects) == 2, "events only: nothing else is sent"
    after = d.state
    assert run_of(after).tools.reported == ["t2"]
    # Nothing else changes: the run still waits for the batch, whose work stays in the outbox.
    assert run_of(after).model_copy(update={"tools": run_of(st).tools}) == run_of(st)
    assert run_of(after).awaiting == "tools" and run_of(after).pending_step == step_id
    assert after.history_len == st.history_len and after.recent_inputs == st.recent_inputs
    assert [e["type"] for e in after.outbox] == ["emit", "emit", "work"]

    d = decided(after, finished(step_id, "t3"))
    assert d.state is not None and reported(d) == events_of("t3", 2)
    assert run_of(d.state).tools.reported == ["t2", "t3"]


def test_a_report_sent_again_changes_nothing(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    first = decided(st, finished(step_id, "t1"))
    assert first.state is not None
    # The same input at once: its effects may not have gone out, so they are performed again.
    again = decided(first.state, finished(step_id, "t1"))
    assert again.replay and again.state is None and reported(again)[:2] == events_of("t1", 1)
    # After another input: reported already, a no-op (also from a redelivered batch).
    later = decided(first.state, finished(step_id, "t2"))
    assert later.state is not None
    for recover in (False, True):
        dup = finished(step_id, "t1")
        dup.recover = recover
        d = decided(later.state, dup)
        assert d.state is None and d.effects == [] and not d.replay


def test_a_report_of_another_step_or_run_changes_nothing(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    for stale in (finished("run1:t9", "t1"), finished(step_id, "t1", run_id="run0"), finished(step_id, "t9")):
        d = decided(st, stale)
        assert d.state is None and d.effects == []

    ended = decided(st, i.AbortInput(input_id="in:2", body=Abort())).state
    assert ended is not None and ended.run is None
    d = decided(ended, finished(step_id, "t1"))
    assert d.state is None and d.effects == []


def test_the_batch_result_reports_the_rest_after_the_reported_ones(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    d = decided(st, finished(step_id, "t3"))
    assert d.state is not None
    d = decided(d.state, batch_result(step_id))
    assert d.state is not None
    # The unreported ones in the model's order, numbered on after t3, first among the effects.
    assert reported(d) == events_of("t1", 2) + events_of("t2", 3)
    assert [e.kind for e in d.effects[:4] if isinstance(e, EmitEvent)] == ["tool.result", "tools.progress"] * 2
    assert run_of(d.state).tools.reported == []
    (msg,) = d.append
    assert [b["tool_use_id"] for b in msg["content"]] == list(CALLS), "every result goes to the model"


def test_a_batch_reported_call_by_call_has_no_events_left_for_its_result(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    for tid in ("t2", "t1", "t3"):
        d = decided(st, finished(step_id, tid))
        assert d.state is not None
        st = d.state
    d = decided(st, batch_result(step_id))
    assert reported(d) == [] and d.state is not None and d.append


def test_an_older_tools_service_that_emitted_the_events_itself(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    d = decided(st, batch_result(step_id, reported=True))
    assert d.state is not None and reported(d) == []


def test_a_result_the_run_moved_past_reports_what_was_not_reported(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    d = decided(st, finished(step_id, "t1"))
    assert d.state is not None
    steered = decided(d.state, i.SteerInput(input_id="in:2", body=FollowUp(content="stop")))
    assert steered.state is not None and run_of(steered.state).pending_step != step_id
    late = decided(steered.state, batch_result(step_id))
    assert late.state is None and reported(late) == events_of("t2", 2) + events_of("t3", 3)

    # The run ended: what the calls reported is gone with it; every result has its
    # events (the event log keeps one per key: the shell publishes only the new ones).
    ended = decided(d.state, i.AbortInput(input_id="in:2", body=Abort())).state
    assert ended is not None
    late = decided(ended, batch_result(step_id))
    assert late.state is None and reported(late) == events_of("t1", 1) + events_of("t2", 2) + events_of("t3", 3)


def test_reports_of_an_abandoned_batch_do_not_count_in_the_next(in_batch: tuple[SessionState, str]) -> None:
    st, step_id = in_batch
    d = decided(st, finished(step_id, "t1"))
    assert d.state is not None
    steered = decided(d.state, i.SteerInput(input_id="in:2", body=FollowUp(content="other numbers")))
    assert steered.state is not None
    gen = run_of(steered.state).pending_step
    assert gen is not None
    d = decided(steered.state, gen_result(gen, [tool_use("u1"), tool_use("u2")], stop="tool_use"))
    assert d.state is not None
    (w,) = [e for e in d.effects if isinstance(e, PublishWork)]
    d = decided(d.state, finished(w.envelope["step_id"], "u2", total=2))
    assert d.state is not None and reported(d) == events_of("u2", 1, total=2)
    assert run_of(d.state).tools.reported == ["u2"]


def test_a_state_stored_before_reports_loads() -> None:
    raw = SessionState(session_id="s1", run=RunState.model_validate(
        {"run_id": "r", "config": {"models": ["m"], "max_tokens": 1}})).dump()
    del raw["run"]["tools"]["reported"]
    assert run_of(SessionState.load(raw, "s1")).tools.reported == []


def test_the_router_asks_for_the_calls_reports() -> None:
    """The batch's work says this router takes a ToolCallFinished per call (a tools
    service sends none to a router that does not ask: an older one)."""
    st = SessionState(session_id="s1")
    st = decided(st, i.StartInput(input_id="in:1", new_id="run1", body=StartRun(input="add"))).state
    assert st is not None
    d = decided(st, gen_result("run1:g1", [tool_use(t) for t in CALLS], stop="tool_use"))
    (w,) = [e for e in d.effects if isinstance(e, PublishWork)]
    assert w.envelope["kind"] == "tools.execute" and w.envelope["report_calls"] is True
