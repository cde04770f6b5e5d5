"""The bench brain of `make bench`: `noop` N times, then "done"; chosen by DemoModel
(what LOOPWIRE_LLM_PROVIDER=scripted builds) when `noop` is offered and the prompt says
`bench:N`."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.llm.bench_model import BenchModel, bench_target, calls_done, count_tool_results
from loopwire.llm.demo_model import DemoModel
from loopwire.llm.model_call import ModelRequest
from loopwire.llm.providers import build_model_factory
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ToolSpec
from tests.model_streams import Streamed

pytestmark = pytest.mark.unit

NOOP = ToolSpec(name="noop", description="Do nothing.",
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
CALC = ToolSpec(name="calculator", description="Evaluate arithmetic.",
                input_schema={"type": "object", "properties": {"expression": {"type": "string"}}})


def request(messages: list[dict[str, Any]], tools: list[ToolSpec]) -> ModelRequest:
    return ModelRequest(model="m1", messages=messages, max_tokens=100, tools=tools)


async def play(model: Any, prompt: str, tools: list[ToolSpec], limit: int = 50) -> list[dict[str, Any]]:
    """Run the loop the way the router does (one tool result per call) until end_turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    for _ in range(limit):
        resp = await model.generate(request(messages, tools))
        messages.append(resp.message)
        if resp.stop_reason != "tool_use":
            return messages
        results = [{"type": "tool_result", "tool_use_id": tu["id"], "content": "ok"} for tu in resp.tool_uses()]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the model never stopped")


async def test_demo_model_hands_bench_runs_to_the_bench_brain() -> None:
    messages = await play(DemoModel(), "bench:3", [NOOP])
    calls = [b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert [(c["name"], c["input"]) for c in calls] == [("noop", {"n": 1}), ("noop", {"n": 2}), ("noop", {"n": 3})]
    assert len({c["id"] for c in calls}) == 3
    assert messages[-1]["content"] == [{"type": "text", "text": "done"}]
    assert count_tool_results(messages) == 3


async def test_the_scripted_provider_builds_a_model_that_benches() -> None:
    factory = build_model_factory(Settings(llm_provider="scripted"), environ={})
    messages = await play(factory("claude-sonnet-4-5"), "bench:2", [NOOP, CALC])
    assert count_tool_results(messages) == 2


async def test_bench_zero_answers_at_once_and_streams_done() -> None:
    sink = Streamed()
    msgs = [{"role": "user", "content": "bench:0"}]
    resp = await sink.run(BenchModel(), request(msgs, [NOOP]))
    assert resp.stop_reason == "end_turn"
    assert sink.pieces == ["done"]


async def test_tool_use_ids_are_deterministic() -> None:
    msgs = [{"role": "user", "content": "bench:5"}]
    a = await BenchModel().generate(request(msgs, [NOOP]))
    b = await DemoModel().generate(request(msgs, [NOOP]))
    assert a.tool_uses()[0]["id"] == b.tool_uses()[0]["id"]
    # A second run on the same session (a longer history, same last message) gets a new id.
    longer = [*msgs, {"role": "assistant", "content": [{"type": "text", "text": "done"}]}, *msgs]
    c = await BenchModel().generate(request(longer, [NOOP]))
    assert c.tool_uses()[0]["id"] != a.tool_uses()[0]["id"]


def test_bench_target_needs_the_noop_tool_and_the_marker() -> None:
    user = [{"role": "user", "content": "please bench:20 now"}]
    assert bench_target(request(user, [NOOP])) == 20
    assert bench_target(request(user, [CALC])) is None
    assert bench_target(request([{"role": "user", "content": "What is 2*3?"}], [NOOP])) is None
    assert bench_target(request([], [NOOP])) is None


async def test_without_noop_the_demo_brain_is_unchanged() -> None:
    resp = await DemoModel().generate(request([{"role": "user", "content": "bench:3 What is 2*3?"}], [CALC]))
    assert [(t["name"], t["input"]) for t in resp.tool_uses()] == [("calculator", {"expression": "2*3"})]


async def test_the_calls_done_read_from_the_end_are_the_results_counted() -> None:
    """What the bench model reads from the conversation's end is what a count of every
    tool_result gives, at every turn of a run and of a second run in the same session."""
    first = await play(BenchModel(), "bench:4", [NOOP])
    second = await play(BenchModel(), "bench:6", [NOOP])
    session = [*first, {"role": "user", "content": [{"type": "text", "text": "bench:4 again"}]}]
    for messages in (first, second, session, second[:1]):
        for upto in range(1, len(messages) + 1):
            assert calls_done(messages[:upto]) == count_tool_results(messages[:upto])
    assert calls_done(session) == 4
