"""The public contract end to end, on every layout (`loopwire up`, `up --workers 2`, one
`loopwire serve` process per service with two routers): plain nats-py, a tool served by
nats.micro, and the llm service talking through the real Anthropic SDK to a local
Messages API server."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from nats.aio.client import Client as NatsClient

from tests.fakes.anthropic_server import FakeAnthropic

from . import conftest
from .conftest import ToolProvider, wait_for_tools
from .events import SessionEvents, query
from .model_requests import content

pytestmark = pytest.mark.e2e

system = conftest.layout_system  # every test here runs on every layout (once per layout)


def sid() -> str:
    return f"e2e-{uuid.uuid4().hex[:10]}"


async def test_agentic_run_with_a_nats_micro_tool(nc: NatsClient, fake: FakeAnthropic,
                                                  tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"chunks": ["Let me ", "add those."], "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}]},
        {"chunks": ["The sum ", "is 42."], "stop_reason": "end_turn"},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        ack = await ev.publish("start", {"v": 1, "input": "What is 2 + 40?", "tools": ["add"],
                                         "model": {"primary": "claude-sonnet-4-5"}})
        assert ack["stream"] == "LOOPWIRE_INGRESS" and ack["seq"] > 0
        ended = await ev.wait_for("run.ended")

    assert ended["status"] == "completed"
    assert ended["final_text"] == "The sum is 42."
    assert ended["turns"] == 2
    assert ended["usage"]["input_tokens"] > 0 and ended["usage"]["output_tokens"] > 0
    assert ended["v"] == 1 and ended["session_id"] == s

    ev.check_bodies()  # every body matches its kind's model (shared/contract/events.py)
    # The memory service measured the requests exactly: it asked the llm service, which
    # asked the Messages API's count_tokens (a call in one process, a NATS request across
    # processes: services/llm/token_count.py).
    counted = [r.body for r in fake.requests if r.path == "/v1/messages/count_tokens"]
    assert any("What is 2 + 40?" in json.dumps(body) for body in counted), counted
    kinds = [e["kind"] for e in ev.durable()]
    assert kinds == ["run.started", "phase.changed", "user.message", "message", "tool.call", "tool.result",
                     "user.message", "message", "phase.changed", "run.ended"]
    deltas = "".join(e["text"] for e in ev.of("text.delta"))
    assert deltas == "Let me add those.The sum is 42."
    seqs = [e["seq"] for e in ev.events]
    assert sorted(seqs) == seqs and len(set(seqs)) == len(seqs), "seq strictly increasing"

    call = ev.of("tool.call")[0]
    result = ev.of("tool.result")[0]
    assert call["name"] == "add" and call["input"] == {"a": 2, "b": 40}
    assert result["tool_use_id"] == call["tool_use_id"] and result["content"] == "42" and not result["is_error"]
    # The provider got the input as the body and the two headers.
    name, body, headers = tool_provider.calls[-1]
    assert (name, body) == ("add", {"a": 2, "b": 40})
    assert headers["Loopwire-Session-Id"] == s and headers["Loopwire-Tool-Use-Id"] == call["tool_use_id"]

    # The model saw the tool offered, and its result in ONE user message.
    reqs = fake.message_requests
    assert [t["name"] for t in reqs[0]["tools"]] == ["add", "finish_agentic_task"]
    assert reqs[0]["stream"] is True
    last_user = reqs[1]["messages"][-1]
    assert last_user["role"] == "user"
    assert [b["type"] for b in content(last_user)] == ["tool_result"]

    transcript = await query(nc, "transcript.get", {"session_id": s})
    assert [e["seq"] for e in transcript["events"]] == [e["seq"] for e in ev.durable()]
    assert transcript["events"] == ev.durable()

    session = await query(nc, "session.get", {"session_id": s})
    assert session["status"] == "idle" and session["profile"] == "agentic" and session["turns"] == 2
    assert [m["role"] for m in session["messages"]] == ["user", "assistant", "user", "assistant"]
    assert session["usage"] == ended["usage"]


async def test_follow_up_message_continues_with_history(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Hi Ada."}, {"text": "Your name is Ada."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "My name is Ada.", "profile": "conversational"})
        await ev.wait_for("run.ended")
        await ev.publish("message", {"content": "What is my name?"})
        second = await ev.wait_for("run.ended", count=2)
    assert second["final_text"] == "Your name is Ada."
    history = fake.message_requests[1]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert "tools" not in fake.message_requests[1], "conversational runs offer no tools"


async def test_duplicate_start_by_msg_id_starts_nothing(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "once"}, {"text": "twice?!"}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        first = await ev.publish("start", {"input": "hello"}, msg_id="same-id")
        second = await ev.publish("start", {"input": "hello"}, msg_id="same-id")
        assert second.get("duplicate") is True and second["seq"] == first["seq"]
        await ev.wait_for("run.ended")
        await asyncio.sleep(0.5)  # time for a second run to show up, if there were one
    assert len(ev.of("run.started")) == 1
    assert len(fake.message_requests) == 1


async def test_overloaded_529_is_retried_through_the_sdk(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.fail_next(529, n=1)
    fake.script("*", [{"text": "made it"}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi"})
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "completed" and ended["final_text"] == "made it"
    assert len(fake.message_requests) == 2


async def test_always_529_without_fallback_fails_clearly(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.fail_next(529, n=None)
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi"})
        ended = await ev.wait_for("run.ended", timeout=30)
        error = await ev.wait_for("error")
    assert ended["status"] == "failed"
    assert error["code"] == "model_overloaded"


async def test_max_turns_ends_with_the_best_answer(nc: NatsClient, fake: FakeAnthropic,
                                                   tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [{"text": "Working on it.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "loop", "tools": ["add"], "limits": {"max_turns": 1}})
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "max_turns" and ended["final_text"] == "Working on it."
    session = await query(nc, "session.get", {"session_id": s})
    assert session["messages"][-1]["content"][0]["type"] == "tool_result", "no dangling tool_use"


@pytest.mark.parametrize(("verb", "body", "code"), [
    ("start", b"{not json", "bad_json"),
    ("start", b"[1, 2]", "bad_request"),
    ("start", json.dumps({"input": "x", "profile": "nope"}).encode(), "invalid_body"),
    ("start", json.dumps({"input": 5}).encode(), "invalid_body"),
    ("start", json.dumps({"profile": "agentic"}).encode(), "invalid_body"),
    ("start", json.dumps({"input": "x", "limits": {"max_turns": "many"}}).encode(), "invalid_body"),
    ("start", json.dumps({"input": "x" * 300_000}).encode(), "body_too_large"),
    ("frobnicate", b"{}", "unknown_verb"),
    ("abort", b"{}", "no_active_run"),
    ("decision", json.dumps({"checkpoint_id": "c1", "decision": "approve"}).encode(), "unknown_checkpoint"),
    ("decision", json.dumps({"checkpoint_id": "c1", "decision": "maybe"}).encode(), "invalid_body"),
])
async def test_bad_input_gets_an_error_event(nc: NatsClient, fake: FakeAnthropic, verb: str, body: bytes,
                                             code: str) -> None:
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish(verb, body)
        error = await ev.wait_for("error")
    assert error["code"] == code and error["message"]
    assert error["v"] == 1 and error["session_id"] == s and error["seq"] >= 1
    session = await query(nc, "session.get", {"session_id": s})
    assert session["status"] == "unknown", "nothing was stored for a rejected input"


@pytest.mark.parametrize("model", [{"primary": "my-local-model"},
                                   {"primary": "claude-sonnet-4-5", "fallbacks": ["my-local-model"]}])
async def test_a_cost_cap_over_an_unpriced_model_is_refused_at_start(nc: NatsClient, fake: FakeAnthropic,
                                                                     model: dict[str, object]) -> None:
    """A cap that cannot be counted is never silently off: the start is refused, naming the
    model, and nothing is asked of the model; the same start with priced models runs."""
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi", "model": model, "limits": {"max_cost_usd": 0.5}})
        error = await ev.wait_for("error")
        assert (error["code"], error["model"]) == ("unpriced_model", "my-local-model")
        assert "my-local-model" in error["message"]
        assert (await query(nc, "session.get", {"session_id": s}))["status"] == "unknown"
        assert not ev.of("run.started") and not fake.message_requests
        fake.script("*", [{"text": "counted"}])
        await ev.publish("start", {"input": "hi", "model": {"primary": "claude-sonnet-4-5"},
                                   "limits": {"max_cost_usd": 0.5}})
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "completed" and ended["cost_usd"] > 0


async def test_invalid_session_id_is_dropped_and_others_are_unaffected(nc: NatsClient, fake: FakeAnthropic) -> None:
    await nc.request("loopwire.in.bad.dots.here.start", b'{"input": "x"}', timeout=5)
    fake.script("*", [{"text": "still fine"}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi"})
        ended = await ev.wait_for("run.ended")
    assert ended["final_text"] == "still fine"


async def test_queries(nc: NatsClient) -> None:
    unknown = await query(nc, "session.get", {"session_id": "never-seen"})
    assert unknown["status"] == "unknown" and unknown["session_id"] == "never-seen"
    assert (await query(nc, "session.get", b"nope"))["error"]["code"] == "bad_json"
    assert (await query(nc, "session.get", {"session_id": "a b"}))["error"]["code"] == "invalid_session_id"
    assert (await query(nc, "transcript.get", {"session_id": "x", "limit": -1}))["error"]["code"] == "invalid_request"
    assert (await query(nc, "transcript.get", {"session_id": "never-seen"}))["events"] == []


async def test_transcript_pagination(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "a"}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hi"})
        await ev.wait_for("run.ended")
    everything = (await query(nc, "transcript.get", {"session_id": s}))["events"]
    page1 = (await query(nc, "transcript.get", {"session_id": s, "limit": 2}))["events"]
    page2 = (await query(nc, "transcript.get", {"session_id": s, "after_seq": page1[-1]["seq"], "limit": 2}))
    assert page1 + page2["events"] == everything[:4]


async def test_a_provider_reply_that_is_not_json_is_a_clear_error(nc: NatsClient, fake: FakeAnthropic) -> None:
    from nats import micro

    svc = await micro.add_service(nc, name="broken-tools", version="1.0.0")

    async def broken(req: micro.Request) -> None:
        await req.respond(b"\xff\xfe not utf-8, not json")

    await svc.add_endpoint(name="broken", handler=broken, metadata={
        "loopwire.tool": "broken", "description": "Replies garbage.", "input_schema": '{"type": "object"}'})
    await wait_for_tools(nc, {"broken"})
    fake.script("*", [{"text": "Trying.", "tool_use": [{"name": "broken", "input": {}}]}, {"text": "It failed."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "use broken", "tools": ["broken"]})
        ended = await ev.wait_for("run.ended")
        error = await ev.wait_for("error")
    await svc.stop()
    assert error["code"] == "bad_tool_reply" and "UTF-8" in error["message"]
    (result,) = ev.of("tool.result")
    assert result["is_error"] and "not valid UTF-8" in result["content"]
    assert ended["status"] == "completed"
