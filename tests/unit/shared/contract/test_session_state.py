"""The session's state as a contract type: what the other services read of it, and a
schema 1 document (flat run fields) loaded into schema 2's parts."""

from __future__ import annotations

import orjson

from loopwire.shared.contract import session_state as read
from loopwire.shared.contract.run_state import PART_FIELDS, RunState
from loopwire.shared.contract.session_state import STATE_SCHEMA, SessionState

CONFIG = {"models": ["m"], "max_tokens": 100, "profile": "agentic_planned", "user_id": "u1"}

SCHEMA_1_RUN = {
    "run_id": "r1", "config": CONFIG, "phase": "approval", "turn": 3, "pending_step": "r1:g3",
    "pending_calls": [{"id": "t1", "name": "add"}], "usage": {"input_tokens": 10, "output_tokens": 5},
    "cost_usd": 0.25, "unpriced": ["m"], "last_context_tokens": 15, "budget_warned": ["max_cost_usd"],
    "budget_capped": True, "quota_spent": True, "outer": 2, "inner": 1, "converging": "max_turns",
    "converge_reason": "turns", "model_offset": 1, "temperature": 0.5, "loop_window": [["a"]], "loop_level": 1,
    "vacuous_retries": 1, "nudges": 2, "context_retries": 1, "step_retries": 1, "tool_calls_made": 4,
    "tools_used": ["add"], "executed": [{"tool": "add", "calls": 4, "ok": 4, "error": 0}],
    "answered": [{"type": "tool_result", "tool_use_id": "t0"}], "tools_known": ["add"], "tools_active": ["add"],
    "checkpoint": {"id": "cp1", "kind": "tool_calls", "ask": ["t1"]}, "plan": [{"step": "s", "status": "pending"}],
    "plan_nudges": 1, "verification": "ok", "workspace": "ws", "permission_answers": {"cp0": {"decision": "approve"}},
    "profile_phase": "execute",
}


def test_a_schema_1_run_loads_into_its_parts_and_is_stored_as_schema_2() -> None:
    st = SessionState.load({"schema": 1, "session_id": "s", "status": "awaiting_approval", "run": SCHEMA_1_RUN}, "s")
    run = st.run
    assert run is not None and st.schema_version == STATE_SCHEMA == 2
    assert (run.awaiting, run.turn, run.pending_step, run.profile_phase) == ("approval", 3, "r1:g3", "execute")
    assert (run.budget.usage.input_tokens, run.budget.cost_usd, run.budget.unpriced, run.budget.last_context_tokens,
            run.budget.warned, run.budget.capped, run.budget.quota_spent) == (
        10, 0.25, ["m"], 15, ["max_cost_usd"], True, True)
    assert run.limits.model_dump() == {name: SCHEMA_1_RUN[name] for name in PART_FIELDS["limits"]}
    assert (run.tools.pending_calls, run.tools.calls_made, run.tools.used, run.tools.known, run.tools.active) == (
        [{"id": "t1", "name": "add"}], 4, ["add"], ["add"], ["add"])
    assert run.tools.executed == SCHEMA_1_RUN["executed"] and run.tools.answered == SCHEMA_1_RUN["answered"]
    assert run.approvals.checkpoint is not None and run.approvals.checkpoint.id == "cp1"
    assert (run.plan.steps, run.plan.nudges, run.plan.verification, run.plan.workspace) == (
        [{"step": "s", "status": "pending"}], 1, "ok", "ws")
    assert run.executor.permission_answers == {"cp0": {"decision": "approve"}}
    stored = st.dump()
    assert stored["schema"] == 2 and "budget_warned" not in stored["run"]
    assert SessionState.load(stored, "s") == st, "schema 2 loads as it was stored"


def test_every_flat_field_of_schema_1_has_a_part() -> None:
    moved = {old for names in PART_FIELDS.values() for old in names}
    top = set(RunState.model_fields) - set(PART_FIELDS)
    assert moved | top | {"phase"} >= set(SCHEMA_1_RUN) and not moved & top


def test_the_readers_say_what_session_get_reports() -> None:
    st = read.stored_state({"schema": 1, "session_id": "s", "status": "awaiting_approval", "run": SCHEMA_1_RUN,
                            "usage": {"input_tokens": 7, "cache_read_input_tokens": 2,
                                      "cache_creation_input_tokens": 1, "output_tokens": 4},
                            "cost_usd": 0.123456789, "forked_from": {"session_id": "src", "seq": 5, "cut_seq": 4}})
    assert read.reported_usage(st) == {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 2,
                                       "cache_creation_input_tokens": 1}, "cached input counts as input, and is said"
    assert read.reported_cost(st) == 0.12345679
    assert read.reported_cost(st.model_copy(update={"cost_unknown": True})) is None
    config = read.config_in_effect(st)
    assert config is not None and config.user_id == "u1" and st.profile == "agentic_planned"
    assert (read.current_run_id(st), read.open_checkpoint_id(st), read.forked_from_session(st)) == ("r1", "cp1", "src")
    idle = read.stored_state({"session_id": "t", "waiting": {"run_id": "r9", "config": CONFIG, "messages": []}})
    assert (read.current_run_id(idle), read.open_checkpoint_id(idle), read.forked_from_session(idle)) == (
        "r9", None, None)
    assert read.config_in_effect(idle) is None


def test_the_dump_writes_an_outbox_of_plain_data_as_json_mode_would() -> None:
    """The outbox holds an event's fields as the router core made them (transition.py):
    the dump writes a model, a set or an int key among them as pydantic's JSON mode does."""
    from loopwire.shared.contract.envelopes import Usage

    st = SessionState(session_id="s", outbox=[
        {"type": "emit", "kind": "message", "key": "k", "run_id": "r",
         "fields": {"usage": Usage(input_tokens=3, output_tokens=2), "tags": {"a"}, "by_turn": {1: "x"}}},
        {"type": "work", "target": "tools.execute", "envelope": {"step_id": "r:t1"}, "msg_id": "m"}])
    dumped = orjson.loads(st.dump_json())
    assert dumped == st.dump() and dumped["outbox"][0]["fields"]["usage"]["input_tokens"] == 3
    assert dumped["outbox"][0]["fields"]["tags"] == ["a"] and dumped["outbox"][0]["fields"]["by_turn"] == {"1": "x"}
    assert SessionState.load(dumped, "s").outbox == dumped["outbox"]


def test_where_a_run_stands_from_its_state() -> None:
    from loopwire.shared.contract.session_state import run_position
    from tests.router_driver import Driver, call
    d = Driver()
    assert run_position(d.state) == (None, None)
    d.start(input="add", tools=["add"])
    assert run_position(d.state) == ("execute", "generating")
    d.answer("Adding.", call("t1", "add"))
    assert run_position(d.state) == ("execute", "tools")
    d.tools("3")
    d.answer("3.")
    assert run_position(d.state) == (None, None)
    t = Driver()
    t.start(input="write", profile="turn_by_turn")
    t.answer("A draft.")
    assert run_position(t.state) == ("review", "awaiting_approval")
