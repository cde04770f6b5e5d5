"""The router's core, transition by transition, with no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, Decision, decide
from loopwire.router.core.effects import EmitEvent, PublishWork
from loopwire.shared.contract.envelopes import GenerationResult, StepError, ToolResultItem, ToolsResult, Usage
from loopwire.shared.contract.protocol import Abort, ApprovalDecision, FollowUp, StartRun
from loopwire.shared.contract.session_state import SessionState

pytestmark = pytest.mark.unit

CFG = CoreConfig(default_model="claude-sonnet-4-5", default_max_tokens=1000)


def start(body: dict[str, Any], seq: int = 1, new_id: str = "run1") -> i.StartInput:
    return i.StartInput(input_id=f"in:{seq}", new_id=new_id, body=StartRun.model_validate(body))


def gen_result(step_id: str, content: list[dict[str, Any]], stop: str = "end_turn",
               usage: tuple[int, int] = (10, 5), run_id: str = "run1") -> i.GenerationInput:
    return i.GenerationInput(input_id=step_id, result=GenerationResult(
        session_id="s1", run_id=run_id, step_id=step_id, message={"role": "assistant", "content": content},
        stop_reason=stop, model="claude-sonnet-4-5", usage=Usage(input_tokens=usage[0], output_tokens=usage[1])))


def tools_result(step_id: str, items: list[tuple[str, str, str]]) -> i.ToolsInput:
    return i.ToolsInput(input_id=step_id, result=ToolsResult(
        session_id="s1", run_id="run1", step_id=step_id,
        results=[ToolResultItem(tool_use_id=t, name=n, content=c) for t, n, c in items]))


def events(d: Decision) -> list[EmitEvent]:
    return [e for e in d.effects if isinstance(e, EmitEvent)]


def kinds(d: Decision) -> list[str]:
    return [e.kind for e in events(d)]


def work(d: Decision) -> list[PublishWork]:
    return [e for e in d.effects if isinstance(e, PublishWork)]


def step(state: SessionState, inp: i.BaseInput) -> tuple[SessionState, Decision]:
    before = state.dump_json()
    d = decide(state, inp, CFG)
    assert state.dump_json() == before, "decide changed the state it was given"
    assert d.state is not None, f"{inp.kind} changed nothing"
    return d.state, d


def tool_use(tid: str, name: str = "add", inp: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp or {"a": 1, "b": 2}}


@pytest.fixture
def fresh() -> SessionState:
    return SessionState(session_id="s1")


def test_start_appends_input_and_asks_memory_for_a_generation(fresh: SessionState) -> None:
    st, d = step(fresh, start({"input": "hi", "system": "be brief"}))
    assert st.status == "running" and st.run is not None and st.run.run_id == "run1"
    assert d.append == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert st.history_len == 1
    assert kinds(d) == ["run.started", "phase.changed", "user.message"]
    assert events(d)[0].fields["profile"] == "agentic" and events(d)[0].fields["config"]["max_tokens"] == 1000
    assert events(d)[1].fields == {"from": "init", "to": "execute"}
    assert events(d)[2].fields == {"turn": 0, "message": d.append[0], "source": "input"}
    (w,) = work(d)
    assert w.target == "memory.assemble"
    assert w.envelope["history_len"] == 1 and w.envelope["system"] == "be brief"
    assert w.envelope["models"] == ["claude-sonnet-4-5"] and w.envelope["max_tokens"] == 1000
    assert st.run.pending_step == w.envelope["step_id"] == "run1:g1"


def test_model_spec_and_limits_flow_into_the_run(fresh: SessionState) -> None:
    st, d = step(fresh, start({"input": "hi", "model": {"primary": "m1", "fallbacks": ["m2"], "max_tokens": 77,
                                                         "temperature": 0.5}, "limits": {"max_turns": 3}}))
    assert st.run is not None
    assert st.run.config.max_turns == 3
    env = work(d)[0].envelope
    assert env["models"] == ["m1", "m2"] and env["max_tokens"] == 77 and env["temperature"] == 0.5


def test_end_turn_completes_with_final_text_and_usage(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "Hello!"}], usage=(100, 20)))
    assert kinds(d) == ["message", "phase.changed", "run.ended"]
    assert events(d)[1].fields == {"from": "execute", "to": "done"}
    ended = events(d)[2].fields
    assert ended["status"] == "completed" and ended["final_text"] == "Hello!" and ended["turns"] == 1
    assert ended["message_count"] == 2, "the request and the answer"
    assert ended["usage"] == {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    assert ended["cost_usd"] == pytest.approx((100 * 3 + 20 * 15) / 1e6)
    assert st.status == "idle" and st.run is None and st.turns == 1
    assert d.append[0]["role"] == "assistant"


def test_tool_use_dispatches_all_calls_in_one_step_in_model_order(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "add"}))
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "Adding."}, tool_use("t1"),
                                             tool_use("t2", "mul")], stop="tool_use"))
    assert kinds(d) == ["message", "tool.call", "tool.call"]
    assert [e.fields["tool_use_id"] for e in events(d)[1:]] == ["t1", "t2"]
    (w,) = work(d)
    assert w.target == "tools.execute"
    assert [c["tool_use_id"] for c in w.envelope["calls"]] == ["t1", "t2"]
    assert st.run is not None and st.run.awaiting == "tools" and st.run.pending_step == w.envelope["step_id"]

    st, d = step(st, tools_result(w.envelope["step_id"], [("t2", "mul", "6"), ("t1", "add", "3")]))
    (msg,) = d.append
    assert msg["role"] == "user"
    assert [b["tool_use_id"] for b in msg["content"]] == ["t1", "t2"], "results go back in the model's order"
    (w2,) = work(d)
    assert w2.target == "memory.assemble" and w2.envelope["history_len"] == st.history_len == 3


def test_redelivered_input_performs_the_outbox_again_and_commits_nothing(fresh: SessionState) -> None:
    inp = start({"input": "hi"})
    st, first = step(fresh, inp)
    again = decide(st, inp, CFG)
    assert again.state is None and again.replay
    assert [e.model_dump() for e in again.effects] == [e.model_dump() for e in first.effects]


def test_stale_result_is_ignored(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    d = decide(st, gen_result("run1:g9", [{"type": "text", "text": "late"}]), CFG)
    assert d.state is None and d.effects == []


def test_step_results_are_recognised_without_a_place_among_the_recent_inputs(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    st, first = step(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"))
    tools_step = work(first)[0].envelope["step_id"]
    assert st.recent_inputs == ["in:1"]  # only ingress ids: the state stays small
    again = decide(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"), CFG)
    assert again.replay and work(again)[0].envelope["step_id"] == tools_step  # the latest: replayed
    st, _ = step(st, tools_result(tools_step, [("t1", "add", "3")]))
    late = decide(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"), CFG)
    assert late.state is None and late.effects == [] and not late.replay  # older: ignored


def test_the_router_emits_the_tool_result_of_a_single_call_step_with_its_transition(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    st, first = step(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"))
    tools_step = work(first)[0].envelope["step_id"]
    result = tools_result(tools_step, [("t1", "add", "3")])
    result.result.results_reported = False  # the tools service left the event to the router
    after, d = step(st, result)
    assert kinds(d)[:3] == ["tool.result", "tools.progress", "user.message"]
    assert events(d)[0].key == "tool.result:t1"
    assert {k: events(d)[0].fields[k] for k in ("tool_use_id", "name", "is_error", "content")} == \
        {"tool_use_id": "t1", "name": "add", "is_error": False, "content": "3"}
    assert {k: events(d)[1].fields[k] for k in ("total", "completed")} == {"total": 1, "completed": 1}

    # Too late to be applied (the run moved on): the executed call still gets its event
    # (the event log keeps one copy per key, so a second one changes nothing).
    moved_on, _ = step(after, gen_result("run1:g2", [tool_use("t2")], stop="tool_use"))
    late = decide(moved_on, result, CFG)
    assert late.state is None and kinds(late) == ["tool.result", "tools.progress"] and work(late) == []
    # ... and from a redelivered chain root, the current outbox follows it.
    result.recover = True
    recovered = decide(moved_on, result, CFG)
    assert kinds(recovered)[0] == "tool.result" and recovered.replay
    assert [w.target for w in work(recovered)] == ["tools.execute"]


def test_a_result_from_a_redelivered_chain_root_replays_the_current_outbox(fresh: SessionState) -> None:
    # shared/runtime/chain.py: a crash lost the hops after this result; the redelivered root hands
    # the recorded result over again, marked recover, and the session's current work goes
    # out again (as a replay: its consumers look for records first).
    st, _ = step(fresh, start({"input": "hi"}))
    st, first = step(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"))
    st, current = step(st, tools_result(work(first)[0].envelope["step_id"], [("t1", "add", "3")]))
    assert [w.target for w in work(current)] == ["memory.assemble"]

    again = gen_result("run1:g1", [tool_use("t1")], stop="tool_use")
    assert decide(st, again, CFG).effects == []  # not redelivered: stale, ignored
    again.recover = True
    replayed = decide(st, again, CFG)
    assert replayed.state is None and replayed.replay
    assert [e.model_dump() for e in replayed.effects] == [e.model_dump() for e in current.effects]

    # The same for a root whose input id has left the recent ones (a long run).
    gone = gen_result("run1:g0", [{"type": "text", "text": "old"}])
    gone.recover = True
    replayed = decide(st, gone, CFG)
    assert replayed.replay and [w.envelope["step_id"] for w in work(replayed)] == \
        [w.envelope["step_id"] for w in work(current)]


def test_at_max_turns_the_last_batch_runs_and_then_the_run_ends_with_the_best_answer(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "go", "limits": {"max_turns": 1}}))
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "Let me look."}, tool_use("t1")],
                                stop="tool_use"))
    assert kinds(d) == ["message", "tool.call"] and [w.target for w in work(d)] == ["tools.execute"], \
        "the capped turn's calls still run"
    st, d = step(st, tools_result("run1:t1", [("t1", "add", "3")]))
    assert kinds(d) == ["user.message", "run.ended"]
    ended = events(d)[-1].fields
    assert (ended["status"], ended["reason"], ended["final_text"]) == ("max_turns", "max_turns", "Let me look.")
    assert d.append == [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3"}]}]
    assert work(d) == [], "no generation after the last round"


def test_max_tokens_ends_with_what_we_have(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "essay"}))
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "Once upon"}], stop="max_tokens"))
    assert events(d)[-1].fields["status"] == "completed"
    assert events(d)[-1].fields["final_text"] == "Once upon"


def test_failed_generation_ends_failed_with_error_event(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    bad = i.GenerationInput(input_id="run1:g1", result=GenerationResult(
        session_id="s1", run_id="run1", step_id="run1:g1", ok=False,
        error=StepError(code="model_overloaded", message="529 from every model", retryable=True)))
    st, d = step(st, bad)
    assert kinds(d) == ["error", "run.ended"]
    assert events(d)[0].fields["code"] == "model_overloaded"
    assert events(d)[1].fields["status"] == "failed"


def test_conversational_answers_once_without_tools(fresh: SessionState) -> None:
    st, d = step(fresh, start({"input": "hi", "profile": "conversational"}))
    assert work(d)[0].envelope["offer_tools"] is False
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "hey"}]))
    assert events(d)[-1].fields["status"] == "completed"


def test_tools_empty_list_offers_no_tools(fresh: SessionState) -> None:
    _, d = step(fresh, start({"input": "hi", "tools": []}))
    assert work(d)[0].envelope["offer_tools"] is False


def test_denied_and_unlisted_tools_are_marked_denied(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "x", "tools": ["add"], "tool_permissions": {"add": "deny"}}))
    st, d = step(st, gen_result("run1:g1", [tool_use("t1", "add"), tool_use("t2", "rm")], stop="tool_use"))
    denied = work(d)[0].envelope["denied"]
    assert set(denied) == {"t1", "t2"}
    assert "denied" in denied["t1"] and "not available" in denied["t2"]


def test_follow_up_during_run_is_taken_at_the_outer_boundary(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    st, d = step(st, i.MessageInput(input_id="in:2", new_id="x", body=FollowUp(content="and then?")))
    assert st.queued and d.append == [] and d.effects == []
    st, d = step(st, gen_result("run1:g1", [{"type": "text", "text": "Hello"}]))
    assert kinds(d) == ["message", "steering", "user.message"], "the run goes on instead of ending"
    (steering,) = [e.fields for e in d.effects if isinstance(e, EmitEvent) and e.kind == "steering"]
    assert steering == {"source": "follow_up_queue", "turn": 1, "messages": 1}
    assert d.append[-1] == {"role": "user", "content": [{"type": "text", "text": "and then?"}]}
    assert work(d)[0].target == "memory.assemble" and not st.queued


def test_message_on_idle_session_starts_a_new_run_with_the_last_config(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi", "model": {"primary": "m9"}}))
    st, _ = step(st, gen_result("run1:g1", [{"type": "text", "text": "Hello"}]))
    st, d = step(st, i.MessageInput(input_id="in:3", new_id="run2", body=FollowUp(content="more")))
    assert st.run is not None and st.run.run_id == "run2"
    assert kinds(d) == ["run.started", "phase.changed", "user.message"]
    assert events(d)[2].fields["source"] == "follow_up"
    assert work(d)[0].envelope["models"] == ["m9"] and work(d)[0].envelope["history_len"] == 3


def test_start_on_busy_session_is_rejected_without_state_change(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    d = decide(st, start({"input": "again"}, seq=2, new_id="run2"), CFG)
    assert d.state is None and kinds(d) == ["error"]
    assert events(d)[0].fields["code"] == "session_busy"


def test_abort_ends_the_run_and_late_results_are_ignored(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    st, _ = step(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use"))
    st, d = step(st, i.AbortInput(input_id="in:5", body=Abort(reason="user said stop")))
    ended = events(d)[-1]
    assert ended.kind == "run.ended" and ended.fields["status"] == "aborted"
    assert ended.fields["reason"] == "user said stop"
    assert d.append[-1]["content"][0]["tool_use_id"] == "t1", "dangling tool_use gets a result"
    late = decide(st, tools_result("run1:t1", [("t1", "add", "3")]), CFG)
    assert late.state is None and late.effects == []


def test_abort_without_run_is_an_error_event(fresh: SessionState) -> None:
    d = decide(fresh, i.AbortInput(input_id="in:1", body=Abort()), CFG)
    assert d.state is None and events(d)[0].fields["code"] == "no_active_run"


def test_unknown_checkpoint_decision_is_an_error_and_changes_nothing(fresh: SessionState) -> None:
    d = decide(fresh, i.DecisionInput(input_id="in:1", body=ApprovalDecision(checkpoint_id="nope", decision="approve")),
               CFG)
    assert d.state is None and events(d)[0].fields["code"] == "unknown_checkpoint"


def test_rejected_input_emits_error_keyed_by_input(fresh: SessionState) -> None:
    d = decide(fresh, i.RejectedInput(input_id="in:7", code="bad_json", message="nope"), CFG)
    assert d.state is None
    (e,) = events(d)
    assert e.kind == "error" and e.key == "error:in:7" and e.fields == {"code": "bad_json", "message": "nope"}


def test_usage_is_counted_once_per_generation(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "what is 1 + 2?"}))
    st, _ = step(st, gen_result("run1:g1", [tool_use("t1")], stop="tool_use", usage=(50, 10)))
    st, _ = step(st, tools_result("run1:t1", [("t1", "add", "3")]))
    st, d = step(st, gen_result("run1:g2", [{"type": "text", "text": "3"}], usage=(70, 4)))
    assert events(d)[-1].fields["usage"] == {"input_tokens": 120, "output_tokens": 14, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    assert events(d)[-1].fields["turns"] == 2
    assert st.usage.input_tokens == 120


def test_state_round_trips_through_json(fresh: SessionState) -> None:
    st, _ = step(fresh, start({"input": "hi"}))
    again = SessionState.load(st.dump(), "s1")
    assert again == st
