"""A subagent end to end: a tool served with nats.micro starts a child run through the
public contract (services/router/core/subagent.py), waits for its `run.ended`, and answers
with the child's final text; the parent run goes on with it."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from nats import micro
from nats.aio.client import Client as NatsClient

from loopwire.router.core.subagent import child_headers, child_start
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


async def serve_delegate(nc: NatsClient, children: list[str]) -> micro.Service:
    """`delegate`: runs the task as a child run and returns what the child concluded."""
    svc = await micro.add_service(nc, name="e2e-delegate", version="1.0.0", description="starts child runs")

    async def delegate(req: micro.Request) -> None:
        body = json.loads(req.data)
        headers = req.headers or {}
        child = f"child-{uuid.uuid4().hex[:8]}"
        children.append(child)
        ended: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

        async def on_end(msg: object) -> None:
            if not ended.done():
                ended.set_result(json.loads(msg.data))  # type: ignore[attr-defined]

        sub = await nc.subscribe(f"loopwire.out.{child}.run.ended", cb=on_end)
        start = child_start(headers["Loopwire-Session-Id"], headers["Loopwire-Tool-Use-Id"], 0, body["task"],
                            tools=[])
        await nc.jetstream().publish(f"loopwire.in.{child}.start", json.dumps(start).encode(),
                                     headers=child_headers(headers["Loopwire-Session-Id"],
                                                           headers["Loopwire-Tool-Use-Id"]))
        try:
            result = await asyncio.wait_for(ended, 30)
        finally:
            await sub.unsubscribe()
        await req.respond(json.dumps({"content": result.get("final_text") or "", "is_error":
                                      result.get("status") != "completed"}).encode())

    schema = {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}
    await svc.add_endpoint(name="delegate", handler=delegate, metadata={
        "loopwire.tool": "delegate", "description": "Hand a task to a subagent.",
        "input_schema": json.dumps(schema)})
    return svc


async def test_a_tool_runs_a_child_run_and_the_parent_uses_its_answer(nc: NatsClient, fake: FakeAnthropic) -> None:
    children: list[str] = []
    svc = await serve_delegate(nc, children)
    try:
        await wait_for_tools(nc, {"delegate"})
        # Requests reach the fake in this order: the parent's first turn, the child's only
        # turn, the parent's second turn.
        fake.script("*", [
            {"text": "Delegating.", "tool_use": [{"name": "delegate", "input": {"task": "name a colour"}}]},
            {"text": "Teal."},
            {"text": "The subagent chose teal."},
        ])
        sid = f"parent-{uuid.uuid4().hex[:8]}"
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("start", {"input": "Ask a subagent for a colour.", "tools": ["delegate"]})
            ended = await ev.wait_for("run.ended", timeout=40)
    finally:
        await svc.stop()

    assert ended["status"] == "completed" and ended["final_text"] == "The subagent chose teal."
    (child,) = children
    result = ev.of("tool.result")[0]
    assert result["name"] == "delegate" and result["content"] == "Teal." and not result["is_error"]

    child_events = (await query(nc, "transcript.get", {"session_id": child}))["events"]
    started = child_events[0]
    assert started["kind"] == "run.started"
    assert started["parent_session_id"] == sid and started["subagent_depth"] == 1
    assert started["parent_tool_use_id"] == result["tool_use_id"]
    assert child_events[-1]["kind"] == "run.ended" and child_events[-1]["final_text"] == "Teal."
    assert len(fake.message_requests) == 3
