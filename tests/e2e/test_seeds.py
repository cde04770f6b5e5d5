"""The profiles' loop behaviour end to end, through the public contract only (plain nats-py,
the fake Messages API, tools served with nats.micro): a budget that ends a run, the
technical summary of a stopped run, conversational defaults, the vacuous allowance,
settings restored from the transcript, the loop ladder, and turn_by_turn."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents, query
from .model_requests import system_text

pytestmark = pytest.mark.e2e


def sid() -> str:
    return f"e2e-seed-{uuid.uuid4().hex[:10]}"


def cut_at_max_tokens(body: dict[str, Any]) -> dict[str, Any]:
    """A model that talks past any budget: its answer fills `max_tokens` and is cut there."""
    limit = int(body["max_tokens"])
    return {"text": "The sum is 42, and here is a long explanation " * 3, "stop_reason": "max_tokens",
            "usage": {"input_tokens": 480, "output_tokens": limit}}


async def test_an_answer_the_budget_cut_short_ends_the_run_budget_exhausted(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [{"text": "Let me add.", "tool_use": [{"name": "add", "input": {"a": 40, "b": 2}}],
                       "usage": {"input_tokens": 400, "output_tokens": 50}}])
    fake.responder = cut_at_max_tokens
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "What is 40 + 2? Explain at length.", "tools": ["add"],
                                   "limits": {"max_total_tokens": 1500}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    requests = fake.message_requests
    assert len(requests) == 2 and requests[0]["max_tokens"] == 1500, "nothing used yet: the whole budget"
    assert requests[1]["max_tokens"] == 600, "1500 - 450 used - 450 re-read: the budget's headroom"
    (_, cut) = ev.of("message")
    assert cut["stop_reason"] == "max_tokens"
    assert ended["status"] == "budget_exhausted", "a run the budget stopped is never `completed`"
    assert ended["reason"] == "max_total_tokens"
    assert ended["final_text"].startswith("The sum is 42"), "with the best answer it has"
    assert ended["usage"]["input_tokens"] + ended["usage"]["output_tokens"] == 1530
    conclusion = ended["conclusion"]
    assert conclusion["classification"] == {"primary": "incomplete", "terminal": "budget_exhausted"}
    assert conclusion["executed"] == [{"tool": "add", "calls": 1, "ok": 1, "error": 0}]
    assert [c[:2] for c in tool_provider.calls] == [("add", {"a": 40, "b": 2})]


async def test_conversational_retries_a_vacuous_answer_and_continues_a_paused_turn(
        nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "."}, {"text": "Hello! How can I help?"},
                      {"text": "Looking it up", "stop_reason": "pause_turn"}, {"text": "It is sunny."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hello", "profile": "conversational"})
        first = await ev.wait_for("run.ended")
        await ev.publish("message", {"content": "and the weather?"})
        second = await ev.wait_for("run.ended", count=2)
    ev.check_bodies()
    assert first["status"] == "completed" and first["final_text"] == "Hello! How can I help?"
    assert first["turns"] == 2, "conversational has 100 turns, so the '.' was retried"
    (retracted,) = ev.of("retracted")
    assert "punctuation_only" in retracted["reason"]
    assert "only punctuation" in system_text(fake.message_requests[1])
    assert second["status"] == "completed" and second["final_text"] == "It is sunny." and second["turns"] == 2
    assert [r["messages"][-1]["role"] for r in fake.message_requests[2:]] == ["user", "assistant"], \
        "the paused turn was sent back as is to continue"


async def test_the_vacuous_allowance_comes_back_after_an_accepted_turn(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    # Two vacuous answers use the allowance (2); a tool turn is accepted; the next "."
    # is retried again instead of ending the run.
    fake.script("*", [{"text": "."}, {"text": "7"}, {"tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                      {"text": "..."}, {"text": "1 + 2 is 3."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "hello, please add one and two for me", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert len(ev.of("retracted")) == 3
    assert ended["status"] == "completed" and ended["final_text"] == "1 + 2 is 3."
    assert len(fake.message_requests) == 5


def keeps_adding(body: dict[str, Any]) -> dict[str, Any]:
    """A model stuck on one call; asked without tools (the converging turn), it says nothing."""
    if any(t["name"] == "add" for t in body.get("tools", [])):
        return {"tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]}
    return {"content": []}


async def test_a_loop_terminated_run_concludes_with_what_it_executed(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.responder = keeps_adding
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add one and one", "tools": ["add"],
                                   "model": {"primary": "m-a", "fallbacks": ["m-b"]}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert [d["escalation"] for d in ev.of("loop.detected")] == ["redirect", "switch_model", "terminate"]
    assert ended["status"] == "loop_terminated" and ended["reason"] == "repeated_tool_call"
    executed = len(tool_provider.calls)
    assert executed == 2, "the third identical call was detected, not executed"
    conclusion = ended["conclusion"]
    assert conclusion["executed"] == [{"tool": "add", "calls": executed, "ok": executed, "error": 0}]
    assert conclusion["classification"] == {"primary": "incomplete", "terminal": "loop_terminated"}
    assert f"add x{executed} ({executed} ok)" in conclusion["summary"]
    assert ended["final_text"] == conclusion["summary"], "no answer of its own: the summary is the answer"


STARTED_WITH = {
    "profile": "agentic", "system": "Be terse.", "tools": ["add"], "tool_permissions": {"add": "approve"},
    "model": {"primary": "m-own", "fallbacks": ["m-fallback"], "max_tokens": 777, "temperature": 0.3},
    "limits": {"max_turns": 7, "max_total_tokens": 90_000, "compaction_at_pct": 0.7},
    "strategy": {"actor": "ops", "expectation": "triage"},
}


async def test_a_session_rebuilt_after_redis_lost_everything_keeps_what_it_was_started_with(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    """The whole of Redis is lost between two runs: the next `message` finds the session
    in the events stream, with its history, its run settings and its seqs."""
    await rebuilt_after_redis_lost_everything(own_system, own_nc, fake)


async def test_the_same_in_the_deployed_layout(split_system: LoopwireContainer, fake: FakeAnthropic) -> None:
    """One `loopwire serve` per service and two routers, as compose and Helm run them."""
    async with connected(split_system) as client:
        await rebuilt_after_redis_lost_everything(split_system, client, fake)


async def rebuilt_after_redis_lost_everything(own_system: LoopwireContainer, own_nc: NatsClient,
                                              fake: FakeAnthropic) -> None:
    _provider, svc = await serve_tools(own_nc)
    await wait_for_tools(own_nc, {"add"})
    fake.script("*", [{"text": "Noted: ALPHA-7."},
                      {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                      {"text": "It is 3."}])
    s = sid()
    async with SessionEvents(own_nc, s) as ev:
        await ev.publish("start", {"input": "My code is ALPHA-7.", **STARTED_WITH})
        first = await ev.wait_for("run.ended")
        r = aioredis.from_url(own_system.get_redis_url())
        await r.flushall()
        await r.aclose()
        lost = await query(own_nc, "transcript.get", {"session_id": s})
        session = await query(own_nc, "session.get", {"session_id": s})
        await wait_for_tools(own_nc, {"add"})  # the tools service writes its catalog again
        await ev.publish("message", {"content": "Now add 1 and 2."})
        asked = await ev.wait_for("approval.requested")
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        second = await ev.wait_for("run.ended", count=2)
        transcript = await query(own_nc, "transcript.get", {"session_id": s})
    await svc.stop()
    ev.check_bodies()
    assert first["status"] == second["status"] == "completed" and second["final_text"] == "It is 3."
    request = fake.message_requests[1]
    assert request["messages"][0]["content"][0]["text"] == "My code is ALPHA-7.", "the history came back"
    assert request["model"] == "m-own" and request["max_tokens"] == 777 and request["temperature"] == 0.3
    assert "Be terse." in str(request["system"])
    assert [t["name"] for t in request["tools"] if t["name"] == "add"] == ["add"]
    started = ev.of("run.started")
    assert len(started) == 2 and started[1]["profile"] == "agentic"
    assert started[1]["config"] == started[0]["config"], "the same settings: models, tools, limits, strategy"
    config = started[1]["config"]
    assert config["models"] == ["m-own", "m-fallback"] and config["tool_permissions"]["add"] == "approve"
    assert (config["max_turns"], config["max_total_tokens"], config["compaction_at_pct"]) == (7, 90_000, 0.7)
    assert (config["actor"], config["expectation"]) == ("ops", "triage")
    assert [e["seq"] for e in lost["events"]][-1] == first["seq"], "transcript.get answers from the stream"
    assert (session["status"], session["profile"], session["turns"]) == ("idle", "agentic", 1)
    assert started[1]["seq"] > first["seq"], "seqs go on after the last one: none is reused"
    seqs = [e["seq"] for e in transcript["events"]]
    assert seqs == sorted(set(seqs)) and seqs[-1] == second["seq"]
    assert [e["kind"] for e in transcript["events"]].count("run.ended") == 2, "the transcript came back too"


async def test_the_ladder_switches_without_a_fallback_by_raising_the_temperature(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.responder = keeps_adding
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add one and one", "tools": ["add"], "model": {"primary": "m-only"}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    detected = ev.of("loop.detected")
    assert [(d["escalation"], d["occurrences"]) for d in detected] == [
        ("redirect", 3), ("switch_model", 4), ("terminate", 5)], "the ladder's three rungs, each counted"
    assert detected[1]["temperature"] == 1.0 and "to_model" not in detected[1]
    assert ev.of("model.fallback") == [], "no fallback model to switch to"
    temperatures = [r.get("temperature") for r in fake.message_requests]
    assert temperatures[:4] == [None] * 4 and set(temperatures[4:]) == {1.0}, \
        "unset, then the model's default made explicit: the switch rung's change of sampling"
    assert ended["status"] == "loop_terminated"


async def test_turn_by_turn_reviews_tool_calls_and_text_through_review_execute_done(
        nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    """turn_by_turn: every proposal is reviewed; a denied call never runs and the model reads
    why (review→review); an approved one runs (review→execute); the execute phase's end of
    turn goes back to review (execute→review) for a new generation, whose proposal is
    reviewed; an approved answer ends the run (→ done)."""
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "I will add 2 and 2.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 2}}]},
        {"text": "Then 40 and 2.", "tool_use": [{"name": "add", "input": {"a": 40, "b": 2}}]},
        {"text": "Done: 40 + 2 = 42."},
        {"text": "The answer is 42."},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "What is 40 + 2?", "profile": "turn_by_turn", "tools": ["add"]})
        first = await ev.wait_for("approval.requested")
        await ev.publish("decision", {"checkpoint_id": first["checkpoint_id"], "decision": "deny",
                                      "note": "wrong numbers"})
        second = await ev.wait_for("approval.requested", count=2)
        assert tool_provider.calls == [], "a denied call never reaches the provider"
        await ev.publish("decision", {"checkpoint_id": second["checkpoint_id"], "decision": "approve"})
        third = await ev.wait_for("approval.requested", count=3)
        await ev.publish("decision", {"checkpoint_id": third["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert first["tool_calls"][0]["input"] == {"a": 2, "b": 2} and "proposal" not in first
    assert second["tool_calls"][0]["input"] == {"a": 40, "b": 2}
    assert third["proposal"] == "The answer is 42."
    assert [c[:2] for c in tool_provider.calls] == [("add", {"a": 40, "b": 2})], "only the approved call ran"
    denied, ran = ev.of("tool.result")
    assert denied["is_error"] and "denied by the user: wrong numbers" in denied["content"]
    assert ran["content"] == "42" and not ran["is_error"]
    assert [(p["from"], p["to"]) for p in ev.of("phase.changed")] == [
        ("init", "review"), ("review", "review"), ("review", "execute"), ("execute", "review"),
        ("review", "execute"), ("execute", "done")]
    assert ended["status"] == "completed" and ended["final_text"] == "The answer is 42."
    requests = fake.message_requests
    assert len(requests) == 4, "decisions make no model call of their own; review is re-entered once"
    assert "Phase: review" in requests[3]["messages"][-1]["content"][0]["text"]
    assert "system-reminder" not in str(requests[2].get("system")), "turn_by_turn injects no progress note"


async def test_turn_by_turn_starts_from_a_snapshot_of_its_workspace(
        fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    """The WorkspaceSnapshot stage: a turn_by_turn run naming a workspace (inside
    the operator's LOOPWIRE_WORKSPACE_ROOTS) proposes knowing its files; once a tool has
    run, the snapshot may be stale and is no longer shown."""
    root = tmp_path / "work"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "deploy.sh").write_text("#!/bin/sh\necho deploy\n")
    (root / "proj" / "AGENTS.md").write_text("Always run the tests first.")
    fake_anthropic.reset()
    fake_anthropic.script("*", [{"text": "Proposal.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]},
                                {"text": "Ran it: 2."}, {"text": "Done: 2."}])
    with started_system(fake_anthropic, LOOPWIRE_WORKSPACE_ROOTS=str(root)) as lw:
        client = await nats.connect(lw.get_nats_url())
        try:
            _provider, svc = await serve_tools(client)
            await wait_for_tools(client, {"add"})
            async with SessionEvents(client, sid()) as ev:
                await ev.publish("start", {"input": "deploy it", "profile": "turn_by_turn", "tools": ["add"],
                                           "metadata": {"workspace": "proj"}})
                asked = await ev.wait_for("approval.requested")
                await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
                proposal = await ev.wait_for("approval.requested", count=2)
                await ev.publish("decision", {"checkpoint_id": proposal["checkpoint_id"], "decision": "approve"})
                ended = await ev.wait_for("run.ended")
            await svc.stop()
        finally:
            await client.drain()
    ev.check_bodies()
    first, *after_tool = (system_text(r) for r in fake_anthropic.message_requests)
    assert "deploy.sh" in first and "Always run the tests first." in first, "the snapshot's files and AGENTS.md"
    assert len(after_tool) == 2 and not any("deploy.sh" in s for s in after_tool)
    assert ended["status"] == "completed" and ended["final_text"] == "Done: 2."
