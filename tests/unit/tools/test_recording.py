"""A recorded fork's tool calls answered from its source's transcript (services/tools/
recording.py): by tool name and input, in order for a call made again, an error result
for a call the recording does not have; and the executor runs nothing for them."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.contract.protocol import make_event
from loopwire.shared.stores.event_log import InMemoryEventLog
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.tools.catalog import Catalog
from loopwire.tools.executor import Executor
from loopwire.tools.recording import Recordings, call_key, position, recorded_results
from loopwire.tools.registry import ToolRegistry

pytestmark = pytest.mark.unit


def ev(sid: str, seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return make_event(kind, sid, "r1", seq=seq, **fields)


def source_events() -> list[dict[str, Any]]:
    return [
        ev("src", 1, "tool.call", turn=1, tool_use_id="a", name="clock", input={"tz": "UTC"}),
        ev("src", 2, "tool.call", turn=1, tool_use_id="b", name="add", input={"a": 1, "b": 2}),
        ev("src", 3, "tool.result", turn=1, tool_use_id="b", name="add", is_error=False, content="3"),
        ev("src", 4, "tool.result", turn=1, tool_use_id="a", name="clock", is_error=False, content="10:00"),
        ev("src", 5, "tool.call", turn=2, tool_use_id="c", name="clock", input={"tz": "UTC"}),
        ev("src", 6, "tool.result", turn=2, tool_use_id="c", name="clock", is_error=True, content="clock broke"),
    ]


def test_results_by_name_and_canonical_input_in_recorded_order() -> None:
    results = recorded_results(source_events())
    assert call_key("add", {"b": 2, "a": 1}) == call_key("add", {"a": 1, "b": 2}), "key order does not matter"
    assert results[call_key("add", {"a": 1, "b": 2})] == [{"content": "3", "is_error": False}]
    assert results[call_key("clock", {"tz": "UTC"})] == [{"content": "10:00", "is_error": False},
                                                       {"content": "clock broke", "is_error": True}]
    fork = [ev("f", 2, "tool.call", tool_use_id="x", name="clock", input={"tz": "UTC"}, turn=1),
            ev("f", 3, "tool.call", tool_use_id="y", name="clock", input={"tz": "UTC"}, turn=1)]
    assert position(fork, "x", call_key("clock", {"tz": "UTC"})) == 0
    assert position(fork, "y", call_key("clock", {"tz": "UTC"})) == 1


async def recordings() -> tuple[InMemoryEventLog, Recordings]:
    log = InMemoryEventLog()
    for event in source_events():
        await log.append("src", event, key=None)
    return log, Recordings(log)


async def test_answers_in_order_then_the_last_again_and_an_error_for_no_match() -> None:
    log, rec = await recordings()
    calls = [ToolCall(tool_use_id=f"f{n}", name="clock", input={"tz": "UTC"}) for n in range(3)]
    for n, c in enumerate(calls):
        await log.append("fork", ev("fork", n + 2, "tool.call", turn=1, tool_use_id=c.tool_use_id, name=c.name,
                                    input=c.input), key=None)
    env = ExecuteTools(session_id="fork", run_id="r", step_id="r:t1", calls=calls, recording="src")
    answers = [await rec.answer(env, c) for c in calls]
    assert [(a.content, a.is_error, a.recorded) for a in answers] == [
        ("10:00", False, True), ("clock broke", True, True), ("clock broke", True, True)]
    other = ToolCall(tool_use_id="f9", name="add", input={"a": 5, "b": 5})
    missing = await rec.answer(env, other)
    assert missing.is_error and missing.recorded and "no recorded result for add" in str(missing.content)


async def test_the_executor_runs_nothing_for_a_recorded_step_and_records_its_answers() -> None:
    _, rec = await recordings()
    ran: list[dict[str, Any]] = []
    registry = ToolRegistry()

    @registry.tool(name="add", description="Add.")
    def add(a: int, b: int) -> str:
        ran.append({"a": a, "b": b})
        return str(a + b)

    steps = InMemoryStepStore()
    executor = Executor(Catalog(registry), steps, None, default_timeout_s=5, recordings=rec)
    env = ExecuteTools(session_id="fork", run_id="r", step_id="r:t1", recording="src",
                       calls=[ToolCall(tool_use_id="f1", name="add", input={"a": 1, "b": 2}),
                              ToolCall(tool_use_id="f2", name="add", input={"a": 2, "b": 2})],
                       denied={"f2": "denied by policy"})
    items = await executor.execute(env)
    assert ran == [], "no tool ran"
    assert (items[0].content, items[0].recorded) == ("3", True)
    assert items[1].is_error and "denied by policy" in str(items[1].content), "a denied call stays denied"
    again = await executor.execute(env)
    assert [i.model_dump() for i in again] == [i.model_dump() for i in items], "answered from the step records"
