"""Loop control end to end, through the public contract: loop detection and its ladder,
vacuous answers, the commitment gate, fallback and the shared circuit breaker, budget
exhaustion, abort and steer during a slow tool."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, wait_for_tools
from .events import SessionEvents, query
from .model_requests import content, system_text

pytestmark = pytest.mark.e2e


def sid() -> str:
    return f"e2e-lc-{uuid.uuid4().hex[:10]}"


def last_user_texts(request: dict[str, Any]) -> list[str]:
    content = request["messages"][-1]["content"]
    return [b["text"] for b in content if b.get("type") == "text"]


async def test_a_model_repeating_one_tool_call_is_redirected_then_terminated(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})

    def stuck(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tools"):
            return {"text": "Checking.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]}
        return {"text": "I kept getting 2, so the answer is 2."}

    fake.responder = stuck
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add 1 and 1, carefully", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert [(e["detection"], e["escalation"]) for e in ev.of("loop.detected")] == [
        ("repeated_tool_call", "redirect"), ("repeated_tool_call", "switch_model"),
        ("repeated_tool_call", "terminate")], "no fallback model: the switch rung raises the temperature"
    assert ended["status"] == "loop_terminated" and ended["reason"] == "repeated_tool_call"
    assert ended["final_text"] == "I kept getting 2, so the answer is 2."
    assert [c[0] for c in tool_provider.calls] == ["add", "add"], "the looping calls are not executed"
    requests = fake.message_requests
    assert "Loop detected. Please try a different approach" in last_user_texts(requests[3])[0]
    assert "tools" not in requests[-1], "the last answer is asked for without tools"
    session = await query(nc, "session.get", {"session_id": s})
    assert session["status"] == "idle"


async def test_an_empty_answer_is_retracted_and_retried(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "."}, {"text": "Hello! How can I help?"}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hello", "tools": []})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    (retracted,) = ev.of("retracted")
    assert retracted["turn"] == 1 and "punctuation_only" in retracted["reason"]
    assert [d["text"] for d in ev.of("text.delta") if d["turn"] == 1] == ["."]
    assert ended["status"] == "completed" and ended["final_text"] == "Hello! How can I help?"
    retry = fake.message_requests[1]
    assert "only punctuation" in system_text(retry)
    assert [m["role"] for m in retry["messages"]] == ["user"], "the vacuous turn is not in the history"


async def test_an_announcement_without_a_tool_call_is_nudged_and_the_model_acts(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "Let me add those numbers."},
        {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}]},
        {"text": "The sum is 42."},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "What is 2 + 40?", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    # The nudged announcement was an answer too: final_text joins the run's answers.
    assert ended["status"] == "completed" and ended["final_text"] == "Let me add those numbers.\n\nThe sum is 42."
    nudge = last_user_texts(fake.message_requests[1])
    assert "without calling a tool" in nudge[0]
    assert "Task: What is 2 + 40?" in system_text(fake.message_requests[2]), "progress reminder after the tool"
    assert tool_provider.calls[-1][:2] == ("add", {"a": 2, "b": 40})


async def test_an_always_529_primary_falls_back_and_its_breaker_opens(nc: NatsClient, fake: FakeAnthropic) -> None:
    primary, fallback = f"e2e-p-{uuid.uuid4().hex[:6]}", f"e2e-f-{uuid.uuid4().hex[:6]}"
    fake.fail_next(529, n=None, model=primary)
    fake.script(fallback, [{"text": f"answer {n}"} for n in range(3)])
    reasons = []
    for n in range(3):
        s = sid()
        async with SessionEvents(nc, s) as ev:
            await ev.publish("start", {"input": "hi", "model": {"primary": primary, "fallbacks": [fallback]}})
            ended = await ev.wait_for("run.ended")
        ev.check_bodies()
        assert ended["status"] == "completed" and ended["final_text"] == f"answer {n}"
        (switch,) = ev.of("model.fallback")
        assert (switch["from_model"], switch["to_model"]) == (primary, fallback)
        reasons.append(switch["reason"].split(":")[0])
    # 3 attempts per run; the 5th consecutive failure (settings default) opens the breaker.
    assert reasons == ["model_overloaded", "model_overloaded", "circuit_open"]
    assert [r["model"] for r in fake.message_requests].count(primary) == 6


async def test_an_always_529_model_without_fallback_fails_clearly(nc: NatsClient, fake: FakeAnthropic) -> None:
    primary = f"e2e-p-{uuid.uuid4().hex[:6]}"
    fake.fail_next(529, n=None, model=primary)
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi", "model": {"primary": primary}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    (error,) = ev.of("error")
    assert ended["status"] == "failed" and error["code"] == "model_overloaded" and "Overloaded" in error["message"]
    assert ev.of("model.fallback") == []


async def test_a_run_out_of_budget_ends_with_a_last_answer(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}],
         "usage": {"input_tokens": 800, "output_tokens": 50}},
        {"text": "Best answer: 42.", "usage": {"input_tokens": 900, "output_tokens": 10}},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "What is 2 + 40?", "tools": ["add"],
                                   "limits": {"max_total_tokens": 1000}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    (warning,) = ev.of("budget.warning")
    assert warning["limit"] == "max_total_tokens" and warning["used"] == 850
    assert ended["status"] == "budget_exhausted" and ended["final_text"] == "Best answer: 42."
    assert ended["usage"] == {"input_tokens": 1700, "output_tokens": 60, "cache_read_input_tokens": 0,
                              "cache_creation_input_tokens": 0}
    last = fake.message_requests[-1]
    # An agentic run offers the finish tool: the converging generation offers only it.
    assert [t["name"] for t in last["tools"]] == ["finish_agentic_task"] and "budget is exhausted" in system_text(last)
    assert last["max_tokens"] <= 1024


async def start_slow_echo(ev: SessionEvents, nc: NatsClient, fake: FakeAnthropic, provider: ToolProvider,
                          then: list[dict[str, Any]]) -> None:
    """Start a run whose first turn calls the slow tool; return once the tool is running."""
    provider.slow_delay_s = 4.0
    await wait_for_tools(nc, {"slow_echo"})
    fake.script("*", [{"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]}, *then])
    await ev.publish("start", {"input": "echo x", "tools": ["slow_echo"]})
    await asyncio.wait_for(provider.slow_started.wait(), 15)


async def test_abort_during_a_slow_tool_ends_the_run_at_once(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await start_slow_echo(ev, nc, fake, tool_provider, then=[])
        began = time.monotonic()
        await ev.publish("abort", {"reason": "changed my mind"})
        ended = await ev.wait_for("run.ended")
        took = time.monotonic() - began
    ev.check_bodies()
    assert ended["status"] == "aborted" and ended["reason"] == "changed my mind"
    assert took < tool_provider.slow_delay_s, "the run did not wait for the tool"
    session = await query(nc, "session.get", {"session_id": s})
    assert session["status"] == "idle"
    assert session["messages"][-1]["content"][0]["type"] == "tool_result", "no dangling tool_use"
    assert len(fake.message_requests) == 1


async def test_steer_during_a_slow_tool_cancels_it_and_the_loop_goes_on(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await start_slow_echo(ev, nc, fake, tool_provider, then=[{"text": "Hi!"}])
        began = time.monotonic()
        await ev.publish("steer", {"content": "never mind, just say hi"})
        ended = await ev.wait_for("run.ended")
        took = time.monotonic() - began
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "Hi!"
    assert took < tool_provider.slow_delay_s, "the steer did not wait for the tool"
    steered = fake.message_requests[1]["messages"][-1]["content"]
    assert steered[0]["type"] == "tool_result" and steered[0]["is_error"] and "steering" in steered[0]["content"]
    assert content({"content": steered})[-1] == {"type": "text", "text": "never mind, just say hi"}
