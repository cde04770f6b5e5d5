"""The deployed layout: one `loopwire serve` process per service, two routers.

- Input on one session reaches the model in the order JetStream accepted it, whichever
  router replica each message lands on, also while a router is killed and restarted.
- kill -9 of each service alone while a tool call is in flight: the run completes, the
  model is not asked again for an answer that was recorded, the transcript has every
  event once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import across, connected, serve_tools, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

SESSIONS = 12
FOLLOW_UPS = 4


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of every user message the model was given, in order."""
    texts = []
    for message in request.get("messages", []):
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts.extend(b["text"] for b in blocks if b.get("type") == "text")
    return texts


async def feed_one_session(nc: NatsClient, sid: str) -> list[dict[str, Any]]:
    """`start` then FOLLOW_UPS `message`s, each published once the previous one was
    acknowledged by JetStream; returns the session's events once its inputs are all in
    its history and it is idle."""
    tokens = [f"{sid}-start", *(f"{sid}-m{n}" for n in range(1, FOLLOW_UPS + 1))]
    async with SessionEvents(nc, sid) as ev:
        await ev.publish("start", {"input": tokens[0], "profile": "conversational"})
        for token in tokens[1:]:
            await ev.publish("message", {"content": token})
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            session = await query(nc, "session.get", {"session_id": sid})
            # A query answered `unavailable` (the events stream, asked about a session with no
            # state yet, answered late) is polled again until the deadline.
            history = " ".join(str(m["content"]) for m in session.get("messages", []) if m["role"] == "user")
            if session.get("status") == "idle" and tokens[-1] in history:
                return list(ev.events)
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{sid} not done after 60 s: {session.get('status', session)}, history {history!r}, "
                                   f"events {[e['kind'] for e in ev.events]}")
            await asyncio.sleep(0.2)


def order_seen_by_the_model(fake: FakeAnthropic, sid: str) -> list[str]:
    """This session's tokens in the order of the last model request that carries its last
    follow-up (the history only grows, so that request holds all of them)."""
    last = f"{sid}-m{FOLLOW_UPS}"
    requests = [r for r in fake.message_requests if any(last in t for t in user_texts(r))]
    assert requests, f"{sid}: the model never saw {last}"
    text = "\n".join(user_texts(requests[-1]))
    found = [(text.index(token), token) for token in
             [f"{sid}-start", *(f"{sid}-m{n}" for n in range(1, FOLLOW_UPS + 1))] if token in text]
    return [token for _, token in sorted(found)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kill_a_router", [pytest.param(False, id="steady"), pytest.param(True, id="router-killed")])
async def test_input_reaches_the_model_in_stream_order_across_two_routers(
        split_system: LoopwireContainer, fake: FakeAnthropic, kill_a_router: bool) -> None:
    async with connected(split_system) as nc:
        sids = [f"order-{n}-{uuid.uuid4().hex[:6]}" for n in range(SESSIONS)]
        feeding = [asyncio.create_task(feed_one_session(nc, s)) for s in sids]
        if kill_a_router:
            await asyncio.sleep(0.3)
            split_system.of_service("router")[0].kill()  # the other one carries on meanwhile
            await asyncio.sleep(1.0)
            await asyncio.to_thread(split_system.start_loopwire)
        events = dict(zip(sids, await asyncio.gather(*feeding), strict=True))

    expected = {s: [f"{s}-start", *(f"{s}-m{n}" for n in range(1, FOLLOW_UPS + 1))] for s in sids}
    seen = {s: order_seen_by_the_model(fake, s) for s in sids}
    assert seen == expected, "every session's input reached the model in the order it was published"
    for s in sids:
        errors = [e for e in events[s] if e["kind"] == "error"]
        assert not errors, f"{s}: {errors}"  # e.g. `session_busy`: a follow-up began the run
        ended = [e for e in events[s] if e["kind"] == "run.ended"]
        assert ended and all(e["status"] == "completed" for e in ended)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("service", ["router", "llm", "tools", "memory", "transcripts"])
async def test_kill_9_of_one_service_mid_tool(split_system: LoopwireContainer, fake: FakeAnthropic,
                                              service: str) -> None:
    async with connected(split_system) as nc:
        provider, svc = await serve_tools(nc)
        provider.slow_delay_s = 3.0
        await wait_for_tools(nc, {"slow_echo"})
        fake.script("*", [
            {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
            {"text": "It said: echo: hi"},
        ])
        sid = f"kill-{service}-{uuid.uuid4().hex[:6]}"
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("start", {"input": "echo hi", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 20)
            split_system.kill_service(service)
            provider.slow_delay_s = 0.1  # a call made again answers quickly
            await asyncio.to_thread(split_system.start_loopwire)
            ended = await ev.wait_for("run.ended", timeout=60)

        assert ended["status"] == "completed" and ended["final_text"] == "It said: echo: hi"
        assert len(fake.message_requests) == 2, "each turn's recorded answer was not asked for again"
        calls = [c for c in provider.calls if c[0] == "slow_echo"]
        # Only a killed tools service loses a call in flight (its result was never recorded);
        # the call made again carries the same idempotency key.
        assert len(calls) == (2 if service == "tools" else 1)
        assert len({c[2]["Loopwire-Tool-Use-Id"] for c in calls}) == 1
        transcript = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
        assert Counter(e["kind"] for e in transcript) == Counter(
            {"run.started": 1, "phase.changed": 2, "user.message": 2, "message": 2, "tool.call": 1, "tool.result": 1, "run.ended": 1})
        assert [e["seq"] for e in transcript] == sorted({e["seq"] for e in transcript})
        await svc.stop()


def handed_to_router(system: LoopwireContainer, via: str) -> float:
    """Step results the llm and tools processes handed to a router `via` direct or jetstream."""
    return sum(sum(across(system, service, "loopwire_handovers_total", to="router", via=via))
               for service in ("llm", "tools"))


@pytest.mark.timeout(120)
async def test_step_results_go_straight_to_the_router_that_sent_the_work(
        split_system: LoopwireContainer, fake: FakeAnthropic) -> None:
    """Two routers: each step's result is a request to the replica that sent its work
    (shared/runtime/direct_results.py), none a JetStream message; and if that replica is
    gone (both killed while the tool runs) the result is published and the run completes."""
    async with connected(split_system) as nc:
        provider, svc = await serve_tools(nc)
        await wait_for_tools(nc, {"slow_echo"})
        fake.script("*", [
            {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "a"}}]},
            {"text": "done a"},
            {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "b"}}]},
            {"text": "done b"},
        ])
        direct, published = handed_to_router(split_system, "direct"), handed_to_router(split_system, "jetstream")
        sid = f"direct-{uuid.uuid4().hex[:6]}"
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("start", {"input": "echo a", "tools": ["slow_echo"]})
            assert (await ev.wait_for("run.ended", timeout=30))["final_text"] == "done a"
        # three results (a generation asking for the tool, the tool's, the answer), the last
        # counted once the router's answer is back, a moment after its run.ended
        for _ in range(50):
            if handed_to_router(split_system, "direct") - direct >= 3:
                break
            await asyncio.sleep(0.1)
        assert handed_to_router(split_system, "direct") - direct == 3
        assert handed_to_router(split_system, "jetstream") - published == 0

        published = handed_to_router(split_system, "jetstream")
        provider.slow_delay_s = 3.0
        provider.slow_started.clear()
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("message", {"content": "echo b"})
            await asyncio.wait_for(provider.slow_started.wait(), 20)
            split_system.kill_service("router")
            await asyncio.to_thread(split_system.start_loopwire)
            ended = await ev.wait_for("run.ended", timeout=60)
        assert ended["status"] == "completed" and ended["final_text"] == "done b"
        assert sum(across(split_system, "tools", "loopwire_handovers_total", to="router", via="jetstream")) \
            >= 1, "the tool's result found no router that sent it and went to JetStream"
        assert handed_to_router(split_system, "jetstream") - published >= 1
        await svc.stop()
