"""Profiles end to end, through the public contract: approval checkpoints (approve, deny,
every service restarted while a run waits), the finish tool, agentic_planned with a
pre-built and a generated plan, and a strategy config chosen by (actor, expectation)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from loopwire.shared.contract import keys
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, serve_tools, wait_for_tools
from .events import SessionEvents, query
from .model_requests import system_text

pytestmark = pytest.mark.e2e


def sid() -> str:
    return f"e2e-pr-{uuid.uuid4().hex[:10]}"


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["name"] for t in request.get("tools", [])]


def add_then_answer(a: int, b: int, answer: str) -> list[dict[str, Any]]:
    return [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": a, "b": b}}]}, {"text": answer}]


async def test_an_approve_tool_waits_for_the_decision_then_runs_without_a_model_call(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", add_then_answer(2, 40, "The sum is 42."))
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "What is 2 + 40?", "tools": ["add"], "tool_permissions": {"add": "approve"}})
        asked = await ev.wait_for("approval.requested")
        assert asked["tool_calls"] == [{"tool_use_id": asked["tool_calls"][0]["tool_use_id"], "name": "add",
                                        "input": {"a": 2, "b": 40}}]
        session = await query(nc, "session.get", {"session_id": s})
        assert session["status"] == "awaiting_approval" and session["checkpoint_id"] == asked["checkpoint_id"]
        assert tool_provider.calls == [] and len(fake.message_requests) == 1
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended")
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        error = await ev.wait_for("error")
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "The sum is 42."
    assert error["code"] == "unknown_checkpoint", "an answered checkpoint cannot be answered again"
    assert [c[:2] for c in tool_provider.calls] == [("add", {"a": 2, "b": 40})]
    assert len(fake.message_requests) == 2, "approval made no model call of its own"
    kinds = [e["kind"] for e in ev.durable() if e["kind"] != "user.message"]
    assert kinds[:7] == ["run.started", "phase.changed", "message", "tool.call", "approval.requested",
                         "approval.decided", "tool.result"]


async def test_a_denied_call_is_an_error_result_the_model_reads(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", add_then_answer(1, 1, "Understood, I will not add."))
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add 1 and 1", "tools": ["add"], "tool_permissions": {"add": "approve"}})
        asked = await ev.wait_for("approval.requested")
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "deny",
                                      "note": "not today"})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "Understood, I will not add."
    assert tool_provider.calls == [], "a denied call never reaches the provider"
    (result,) = ev.of("tool.result")
    assert result["is_error"] and "denied by the user: not today" in result["content"]
    seen = fake.message_requests[1]["messages"][-1]["content"][0]
    assert seen["is_error"] and "denied by the user: not today" in seen["content"]


async def test_every_service_restarts_while_a_run_awaits_approval(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    _provider, svc = await serve_tools(own_nc)
    await wait_for_tools(own_nc, {"add"})
    fake.script("*", add_then_answer(20, 22, "It is 42."))
    s = sid()
    async with SessionEvents(own_nc, s) as ev:
        await ev.publish("start", {"input": "20 + 22?", "tools": ["add"], "tool_permissions": {"add": "approve"}})
        asked = await ev.wait_for("approval.requested")
        assert own_system.terminate() == 0
        r = aioredis.from_url(own_system.get_redis_url())
        await r.delete(keys.TOOL_CATALOG)  # so waiting for the tool waits for the new tools service
        await r.aclose()
        own_system.start_loopwire()
        session = await query(own_nc, "session.get", {"session_id": s})
        assert session["status"] == "awaiting_approval", "the pause is in Redis, not in a process"
        await wait_for_tools(own_nc, {"add"})
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended", timeout=30)
    await svc.stop()
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "It is 42."
    assert ev.of("tool.result")[0]["content"] == "42"
    assert len(fake.message_requests) == 2


async def test_the_finish_tool_ends_the_run_with_a_conclusion(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Concluding.", "tool_use": [{"name": "finish_agentic_task", "input": {
        "summary": "The disk is nearly full.", "confidence": 0.8,
        "findings": [{"action": "raise", "class": "disk_full", "summary": "/var at 93%"}],
        "outputs": [{"type": "email", "payload": {"to": "ops"}}]}}]}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "Check the disk."})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert "finish_agentic_task" in tool_names(fake.message_requests[0])
    assert ended["status"] == "completed" and ended["final_text"] == "The disk is nearly full."
    conclusion = ended["conclusion"]
    assert conclusion["findings"][0]["action"] == "raise" and conclusion["findings"][0]["class"] == "disk_full"
    assert conclusion["outputs"] == [{"kind": "output_proposal", "type": "email", "dedupe_key": None,
                                      "payload": {"to": "ops"}}]
    assert ev.of("tool.result") == [], "the finish call is intercepted, never executed"
    session = await query(nc, "session.get", {"session_id": s})
    assert session["messages"][-1]["content"][0]["content"] == "The run is finished."


async def test_the_applications_own_finish_tool_and_a_run_without_one(nc: NatsClient, fake: FakeAnthropic) -> None:
    own = {"description": "Report the ticket's resolution.", "input_schema": {
        "type": "object", "properties": {"ticket": {"type": "string"}, "resolution": {"type": "string"}},
        "required": ["ticket", "resolution"]}}
    fake.script("*", [{"text": "Closing.", "tool_use": [{"name": "finish_agentic_task", "input": {
        "ticket": "T-7", "resolution": "rebooted"}}]}, {"text": "No finish tool here."}])
    s, plain = sid(), sid()
    async with SessionEvents(nc, s) as ev, SessionEvents(nc, plain) as ev2:
        await ev.publish("start", {"input": "Close ticket 7.", "finish": own})
        ended = await ev.wait_for("run.ended")
        await ev2.publish("start", {"input": "Just answer.", "finish": False})
        ended2 = await ev2.wait_for("run.ended")
    ev.check_bodies()
    (offered,) = [t for t in fake.message_requests[0]["tools"] if t["name"] == "finish_agentic_task"]
    assert (offered["description"], offered["input_schema"]) == (own["description"], own["input_schema"])
    assert ended["status"] == "completed" and ended["conclusion"] == {"ticket": "T-7", "resolution": "rebooted"}
    assert ended["final_text"] == "Closing." and ev.of("tool.result") == []
    assert "finish_agentic_task" not in tool_names(fake.message_requests[1]), "finish: false leaves it out"
    assert ended2["status"] == "completed" and ended2["conclusion"] is None
    async with SessionEvents(nc, sid()) as ev3:
        await ev3.publish("start", {"input": "x", "finish": {"description": "d", "input_schema": {"type": "array"}}})
        error = await ev3.wait_for("error")
    assert error["code"] == "invalid_body" and "input_schema" in error["message"]


def update_plan(*steps: tuple[str, str]) -> dict[str, Any]:
    return {"name": "update_plan", "input": {"plan": [{"step": s, "status": st} for s, st in steps]}}


async def test_planned_with_a_prebuilt_plan_executes_then_verifies(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "Step 1.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 3}}, update_plan(("add", "completed"))]},
        {"text": "Verified: 2 + 3 = 5."},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add 2 and 3", "profile": "agentic_planned", "tools": ["add"],
                                   "plan": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "Verified: 2 + 3 = 5."
    assert [(p["from"], p["to"]) for p in ev.of("phase.changed")] == [
        ("init", "plan"), ("plan", "execute"), ("execute", "verify"), ("verify", "done")]
    assert [u["source"] for u in ev.of("plan.updated")] == ["start", "model", "verification"]
    assert tool_names(fake.message_requests[0]) == ["add", "update_plan", "finish_agentic_task"]
    assert [c[0] for c in tool_provider.calls] == ["add"], "update_plan never reaches a provider"
    session = await query(nc, "session.get", {"session_id": s})
    assert session["plan"]["phase"] == "done" and session["plan"]["verification"] == "Verified: 2 + 3 = 5."
    assert session["plan"]["steps"] == [{"step": "add", "status": "completed"}]


async def test_planned_with_a_generated_plan(nc: NatsClient, fake: FakeAnthropic,
                                             tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "Planning.", "tool_use": [update_plan(("add the numbers", "pending"), ("report", "pending"))]},
        {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 4, "b": 4}},
                                         update_plan(("add the numbers", "completed"), ("report", "completed"))]},
        {"text": "Checked: the sum is 8."},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add 4 and 4", "profile": "agentic_planned", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "Checked: the sum is 8."
    first = fake.message_requests[0]
    assert tool_names(first) == ["update_plan"], "the plan phase offers only update_plan"
    assert "Phase: plan" in system_text(first)
    assert [(p["from"], p["to"]) for p in ev.of("phase.changed")] == [
        ("init", "plan"), ("plan", "execute"), ("execute", "verify"), ("verify", "done")]
    assert ev.of("plan.updated")[0]["steps"] == [{"step": "add the numbers", "status": "pending"},
                                                 {"step": "report", "status": "pending"}]


async def test_a_strategy_is_chosen_by_actor_and_expectation(nc: NatsClient, fake: FakeAnthropic,
                                                             system: LoopwireContainer) -> None:
    actor = f"ops-{uuid.uuid4().hex[:6]}"
    r = aioredis.from_url(system.get_redis_url())
    try:
        for expectation, role in (("triage", "You triage incidents."), ("report", "You write reports."),
                                  (None, "You are the ops agent.")):
            await r.hset(keys.STRATEGIES, f"{actor}/{expectation}", json.dumps(
                {"actor": actor, "expectation": expectation, "role": role, "guidelines": [f"Role {role}"]}))
        fake.script("*", [{"text": "report done"}, {"text": "default done"}])
        for expectation in ("report", "unknown"):
            async with SessionEvents(nc, sid()) as ev:
                await ev.publish("start", {"input": "go", "strategy": {"actor": actor, "expectation": expectation}})
                await ev.wait_for("run.ended")
    finally:
        await r.delete(keys.STRATEGIES)
        await r.aclose()
    report, default = (system_text(req) for req in fake.message_requests[-2:])
    assert report.startswith("You write reports.") and "triage" not in report
    assert default.startswith("You are the ops agent."), "an unknown expectation gets the actor's default"


async def test_turn_by_turn_reviews_a_text_proposal(nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Draft one."}, {"text": "Draft two."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "write a line", "profile": "turn_by_turn"})
        first = await ev.wait_for("approval.requested")
        await ev.publish("decision", {"checkpoint_id": first["checkpoint_id"], "decision": "deny", "note": "shorter"})
        second = await ev.wait_for("approval.requested", count=2)
        await ev.publish("decision", {"checkpoint_id": second["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert (first["proposal"], second["proposal"]) == ("Draft one.", "Draft two.")
    assert ended["status"] == "completed" and ended["final_text"] == "Draft two."
    assert "shorter" in fake.message_requests[1]["messages"][-1]["content"][0]["text"]
    assert [(p["from"], p["to"]) for p in ev.of("phase.changed")] == [
        ("init", "review"), ("review", "review"), ("review", "execute"), ("execute", "done")], \
        "the profile's transition table"


async def test_a_child_run_beyond_the_depth_limit_is_refused(nc: NatsClient, fake: FakeAnthropic) -> None:
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "sub task", "metadata": {
            "parent_session_id": f"unknown-{s}", "parent_tool_use_id": "toolu_1", "subagent_depth": 4}})
        error = await ev.wait_for("error")
    assert error["code"] == "subagent_depth_exceeded"
    assert ev.of("run.started") == []
