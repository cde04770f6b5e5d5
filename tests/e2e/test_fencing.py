"""Fencing: a worker paused (SIGSTOP) past AckWait while another replica takes its work
over performs, once resumed, no side effect that is recorded or claimed.

One `loopwire serve` per service and two tools replicas. The first tools replica is
stopped while it runs a slow tool call, and more runs' calls are pushed to it meanwhile
(JetStream still counts it as a member of the deliver group). The second replica takes
everything over after AckWait; every run completes. Then the first one resumes with its
buffered deliveries and its call in flight: no recorded tool call runs again and the
model is asked for nothing more."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

TWO_TOOLS = ("serve router", "serve llm", "serve memory", "serve transcripts", "serve tools", "serve tools")


@pytest.mark.timeout(180)
async def test_a_paused_tools_replica_repeats_no_recorded_call(fake_anthropic: FakeAnthropic,
                                                               fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic, layout=TWO_TOOLS) as system:
        await paused_replica_scenario(system, fake)


async def paused_replica_scenario(system: LoopwireContainer, fake: FakeAnthropic) -> None:
    first, second = system.of_service("tools")
    second.kill()  # for now the first replica takes every call
    async with connected(system) as nc:
        provider, svc = await serve_tools(nc)
        provider.slow_delay_s = 2.0
        await wait_for_tools(nc, {"slow_echo", "add"})

        def answer(body: dict) -> dict:
            # Turn 1 calls the run's tool; turn 2 (a tool result came back) ends the run.
            text = str(body["messages"][-1]["content"])
            if "tool_result" in text:
                return {"text": "done"}
            if "slow" in text:
                return {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]}
            return {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]}

        fake.responder = answer
        sids = [f"fence-{n}-{uuid.uuid4().hex[:6]}" for n in range(4)]
        streams = [SessionEvents(nc, s) for s in sids]
        for ev in streams:
            await ev.__aenter__()
        try:
            await streams[0].publish("start", {"input": "slow please", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 20)
            first.pause()  # mid-call, holding its claim and its message
            provider.slow_delay_s = 0.0
            for ev in streams[1:]:
                await ev.publish("start", {"input": "add please", "tools": ["add"]})
            await asyncio.sleep(1.0)  # their calls are pushed to the paused replica too
            await asyncio.to_thread(system.start_loopwire)  # the second replica
            for ev in streams:
                ended = await ev.wait_for("run.ended", timeout=90)
                assert ended["status"] == "completed" and ended["final_text"] == "done"
            model_calls = len(fake.message_requests)
            first.resume()
            await asyncio.sleep(4.0)  # what the resumed replica would do, it has done by now
        finally:
            first.resume()
            for ev in streams:
                await ev.__aexit__(None, None, None)

        assert len(fake.message_requests) == model_calls == 2 * len(sids), "no model call after the resume"
        by_id = Counter((name, headers["Loopwire-Tool-Use-Id"]) for name, _, headers in provider.calls)
        adds = {key: n for key, n in by_id.items() if key[0] == "add"}
        assert len(adds) == len(sids) - 1 and set(adds.values()) == {1}, f"each add ran once: {adds}"
        slow = [n for key, n in by_id.items() if key[0] == "slow_echo"]
        # The paused call never recorded its result: the second replica ran it again (once),
        # with the same idempotency key; nothing ran it a third time.
        assert len(slow) == 1 and slow[0] <= 2
        for sid in sids:
            transcript = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            kinds = Counter(e["kind"] for e in transcript if e["kind"] != "retracted")
            assert kinds == Counter({"run.started": 1, "phase.changed": 2, "user.message": 2, "message": 2,
                                     "tool.call": 1, "tool.result": 1, "run.ended": 1}), (sid, kinds)
        await svc.stop()
