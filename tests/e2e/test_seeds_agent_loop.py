"""The agent loop and the strategy loop of the designs (issue 26 items 6-10, 12-15), end to
end in the deployed layout (one `loopwire serve` per service, two routers) with the
operator's caps and strategy file set, through the public contract only: plain nats-py,
the fake Messages API, tools served with nats.micro. The inner cap's last round, the outer
cap with queued follow-ups, the steering events, looping turns left out of the history,
the technical summary as the conclusion, the file's strategy over Redis's, a cleared
finding, and a decision that runs exactly the stored calls after the session's state was
lost."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from loopwire.router.core.finish import GUIDELINE
from loopwire.shared.contract import keys
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, serving_tools, started_system
from .events import SessionEvents, query
from .model_requests import content

pytestmark = pytest.mark.e2e

STRATEGIES = [{"actor": "e2e-ops", "expectation": "triage", "role": "Role from the file.", "tools": ["add"]}]


@pytest.fixture(scope="module")
def seeds_system(fake_anthropic: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[LoopwireContainer]:
    path: Path = tmp_path_factory.mktemp("seeds") / "strategies.json"
    path.write_text(json.dumps(STRATEGIES))
    with started_system(fake_anthropic, layout="split", LOOPWIRE_MAX_INNER_ITERATIONS="3",
                        LOOPWIRE_MAX_OUTER_ITERATIONS="2", LOOPWIRE_STRATEGY_FILE=str(path)) as lw:
        yield lw


@pytest.fixture
async def client(seeds_system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    nc = await nats.connect(seeds_system.get_nats_url())
    yield nc
    await nc.drain()


@pytest.fixture
async def provider(client: NatsClient) -> AsyncIterator[ToolProvider]:
    async with serving_tools(client) as tools:
        yield tools


@pytest.fixture
async def redis(seeds_system: LoopwireContainer) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(seeds_system.get_redis_url())
    yield r
    await r.aclose()


def sid() -> str:
    return f"e2e-seeds-{uuid.uuid4().hex[:10]}"


class HeldAnswers:
    """The fake's answers in order, each held until the test lets it go (the responder
    runs in the fake's handler threads)."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.go = [threading.Event() for _ in answers]
        self._n = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            n, self._n = self._n, self._n + 1
        if n >= len(self.answers):
            return None
        self.go[n].wait(timeout=15)
        return self.answers[n]


async def queued(r: aioredis.Redis, s: str, count: int) -> None:
    """Until the session's state holds `count` follow-ups waiting for the outer boundary."""
    async with asyncio.timeout(10):
        while True:
            raw = await r.hget(keys.session_state(s), "state")
            if raw is not None and len(json.loads(raw).get("queued") or []) >= count:
                return
            await asyncio.sleep(0.02)


def adds_forever(body: dict[str, Any]) -> dict[str, Any]:
    """A model that calls `add` with new numbers every turn (no loop), while it may."""
    n = len(body["messages"])
    return {"text": f"Adding {n}.", "tool_use": [{"name": "add", "input": {"a": n, "b": 1}}]}


def tool_uses(messages: list[dict[str, Any]]) -> list[str]:
    return [b["id"] for m in messages for b in m["content"] if b.get("type") == "tool_use"]


async def test_the_round_at_the_inner_cap_still_runs_then_the_run_ends_with_its_summary(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    fake.responder = adds_forever
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "add numbers until told", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
        session = await query(client, "session.get", {"session_id": s})
    ev.check_bodies()
    assert len(provider.calls) == 3 and len(fake.message_requests) == 3, "three rounds, no fourth generation"
    assert (ended["status"], ended["reason"]) == ("max_turns", "max_inner_iterations")
    assert session["messages"][-1]["content"][0]["type"] == "tool_result", "the last round's results are kept"
    assert ended["conclusion"]["executed"] == [{"tool": "add", "calls": 3, "ok": 3, "error": 0}]
    assert ended["conclusion"]["summary"].startswith("Stopped at the limit of tool rounds")
    assert ended["final_text"].startswith("Adding"), "the best answer it has"


async def test_follow_ups_past_the_outer_cap_stay_for_the_next_run(
        client: NatsClient, fake: FakeAnthropic, redis: aioredis.Redis) -> None:
    held = HeldAnswers({"text": "Answer one."}, {"text": "Answer two."}, {"text": "Answer three."})
    fake.responder = held
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "question one", "tools": []})
        await ev.publish("message", {"content": "question two"})
        await queued(redis, s, 1)
        held.go[0].set()  # answered: the boundary takes question two (outer iteration 2)
        await ev.wait_for("steering", source="follow_up_queue")
        await ev.publish("message", {"content": "question three"})
        await queued(redis, s, 1)
        held.go[1].set()  # answered at the cap: question three is for the next run
        first = await ev.wait_for("run.ended")
        held.go[2].set()
        second = await ev.wait_for("run.ended", count=2)
    ev.check_bodies()
    assert (first["status"], first["reason"]) == ("max_turns", "max_outer_iterations")
    assert "Answer two." in first["final_text"] and "Stopped" not in first["final_text"], \
        "the complete answer given before the cap"
    assert first["conclusion"]["summary"].startswith("Stopped at the limit of follow-ups taken in one run")
    assert [e["source"] for e in ev.of("steering")] == ["follow_up_queue"]
    second_run = [e for e in ev.of("user.message") if e["run_id"] == second["run_id"]]
    assert second_run[0]["message"]["content"] == [{"type": "text", "text": "question three"}]
    assert second["status"] == "completed" and second["final_text"] == "Answer three."


async def test_a_steer_and_the_error_policy_report_their_steering(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    provider.slow_delay_s = 2.0
    fake.script("*", [{"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]},
                      {"text": "Stopped echoing."}])
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "echo slowly", "tools": ["slow_echo"]})
        await provider.slow_started.wait()
        await ev.publish("steer", {"content": "stop that"})
        await ev.wait_for("run.ended")
    assert [(e["source"], e["turn"]) for e in ev.of("steering")] == [("priority_queue", 1)]
    fake.reset()
    fake.fail_next(status=400, message="prompt is too long: 210000 tokens > 200000 maximum")
    fake.fail_next(status=404, model="m-typo", error_type="not_found_error", message="model: m-typo")
    fake.script("*", [{"text": "Hi."}])
    async with SessionEvents(client, sid()) as ev:
        await ev.publish("start", {"input": "hello", "model": {"primary": "m-typo", "fallbacks": ["m-good"]}})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    assert [(e["source"], e["reason"]) for e in ev.of("steering")] == [
        ("retry_reduced_context", "context_too_long"), ("model_switch", "not_found")]
    assert ev.of("steering")[1]["to_model"] == "m-good" and ended["status"] == "completed"


def keeps_adding(body: dict[str, Any]) -> dict[str, Any]:
    """Stuck on one call; asked without tools (the converging turn), it says nothing."""
    if any(t["name"] == "add" for t in body.get("tools", [])):
        return {"text": "Checking.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]}
    return {"content": []}


async def test_looping_turns_are_not_kept_and_each_rung_reports_its_steering(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    fake.responder = keeps_adding
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "add one and one", "tools": ["add"],
                                   "model": {"primary": "m-a", "fallbacks": ["m-b"]}})
        ended = await ev.wait_for("run.ended")
        session = await query(client, "session.get", {"session_id": s})
    ev.check_bodies()
    assert [d["escalation"] for d in ev.of("loop.detected")] == ["redirect", "switch_model", "terminate"]
    assert [(e["source"], e.get("to_model")) for e in ev.of("steering")] == [
        ("loop_redirect", None), ("model_switch", "m-b")]
    retracted = [r["reason"] for r in ev.of("retracted")]
    assert retracted == [f"loop detected (repeated_tool_call): {rung}"
                         for rung in ("redirect", "switch_model", "terminate")]
    looping = [b["id"] for m in ev.of("message")[2:5] for b in m["message"]["content"] if b["type"] == "tool_use"]
    assert len(looping) == 3 and not set(looping) & set(tool_uses(session["messages"])), \
        "the turns the ladder redirected or terminated are not in the history"
    assert len(tool_uses(session["messages"])) == len(provider.calls) == 2
    assert ended["status"] == "loop_terminated"
    assert ended["conclusion"]["executed"] == [{"tool": "add", "calls": 2, "ok": 2, "error": 0}]


async def test_the_file_strategy_wins_and_a_text_answer_concludes_with_an_explanation(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider, redis: aioredis.Redis) -> None:
    await redis.hset(keys.STRATEGIES, mapping={
        "ops/triage": json.dumps({"actor": "e2e-ops", "expectation": "triage", "role": "Role from Redis."}),
        "ops/report": json.dumps({"actor": "e2e-ops", "expectation": "report", "role": "Redis only."})})
    fake.script("*", [{"text": "Checking.", "tool_use": [{"name": "add", "input": {"a": 40, "b": 2}}]},
                      {"text": "It is 42."}, {"text": "Reported."}])
    async with SessionEvents(client, sid()) as ev:
        await ev.publish("start", {"input": "what is 40 + 2?", "strategy": {"actor": "e2e-ops",
                                                                              "expectation": "triage"}})
        triage = await ev.wait_for("run.ended")
    async with SessionEvents(client, sid()) as ev2:
        await ev2.publish("start", {"input": "report", "strategy": {"actor": "e2e-ops", "expectation": "report"}})
        await ev2.wait_for("run.ended")
    ev.check_bodies()
    first, _, report = (str(r.get("system")) for r in fake.message_requests)
    assert "Role from the file." in first and "Role from Redis." not in first, "the file wins"
    assert GUIDELINE in first, "the strategy asks for a conclusion: the finish tool's guideline"
    assert "Redis only." in report, "a pair only Redis defines"
    conclusion = triage["conclusion"]
    assert conclusion["classification"] == {"primary": "task_complete", "terminal": "explanation"}
    assert conclusion["summary"] == "It is 42. Executed 1 tool call(s) over 2 turn(s): add x1 (1 ok)."


async def test_a_cleared_finding_is_its_key_and_its_reason(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    findings = [{"action": "raise", "class": "disk_full", "summary": "/var at 93%", "key": "var-disk"},
                {"action": "clear", "key": "tmp-disk", "reason": "pruned to 40%", "severity": "low"}]
    fake.script("*", [{"tool_use": [{"name": "finish_agentic_task",
                                     "input": {"summary": "Disks checked.", "findings": findings}}]}])
    async with SessionEvents(client, sid()) as ev:
        await ev.publish("start", {"input": "check the disks", "tools": ["add"]})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    raised, cleared = ended["conclusion"]["findings"]
    assert raised["action"] == "raise" and raised["key"] == "var-disk"
    assert cleared == {"key": "tmp-disk", "status": "clear", "reason": "pruned to 40%"}


async def test_a_decision_after_the_state_is_lost_runs_exactly_the_stored_calls(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider, redis: aioredis.Redis) -> None:
    batch = [{"name": "add", "input": {"a": 40, "b": 2}}, {"name": "slow_echo", "input": {"text": "kept"}},
             {"name": "add", "input": {"a": 1, "b": 1}}]
    fake.script("*", [{"text": "First this.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 2}}]},
                      {"text": "Now these.", "tool_use": batch}, {"text": "Done: 42."}])
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "add, echo, add", "tools": ["add", "slow_echo"],
                                   "tool_permissions": {"add": "approve"}})
        first = await ev.wait_for("approval.requested")
        await ev.publish("decision", {"checkpoint_id": first["checkpoint_id"], "decision": "approve"})
        asked = await ev.wait_for("approval.requested", count=2)
        await redis.delete(keys.session_state(s), keys.session_history(s))  # the state is lost
        waiting = await query(client, "session.get", {"session_id": s})
        assert (waiting["status"], waiting["checkpoint_id"]) == ("awaiting_approval", asked["checkpoint_id"])
        assert (waiting["source"], waiting["phase"], waiting["activity"]) == \
            ("transcript", "execute", "awaiting_approval"), "where the run waits, from its transcript"
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended")
    ev.check_bodies()
    ran = [(name, body) for name, body, _ in provider.calls]
    assert ran[0] == ("add", {"a": 2, "b": 2}), "the first batch, before the loss"
    assert sorted(map(str, ran[1:])) == sorted(map(str, [(b["name"], b["input"]) for b in batch])), \
        "exactly the stored calls, once each (they run side by side)"
    results = content(fake.message_requests[-1]["messages"][-1])
    assert [b["content"] for b in results] == ["42", "echo: kept", "2"], "their results, in the model's order"
    assert [e["decision"] for e in ev.of("approval.decided")] == ["approve", "approve"]
    assert ended["status"] == "completed" and ended["turns"] == 3 and "Done: 42." in ended["final_text"]
    assert ended["usage"]["input_tokens"] == sum(m["usage"]["input_tokens"] for m in ev.of("message"))
