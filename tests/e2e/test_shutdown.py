"""Graceful shutdown: SIGTERM during a run stops taking new work, lets the in-flight step
finish (or hands it back unacked), and exits within the grace period; after a restart
the run finishes, having lost nothing and repeated nothing."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from loopwire.shared.contract import keys
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import serve_tools, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


async def test_sigterm_during_a_slow_tool_loses_and_repeats_nothing(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    provider, svc = await serve_tools(own_nc)
    provider.slow_delay_s = 2.0
    await wait_for_tools(own_nc, {"slow_echo"})
    fake.script("*", [
        {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "bye"}}]},
        {"text": "It said: echo: bye"},
    ])
    sid = "term-1"
    async with SessionEvents(own_nc, sid) as ev:
        await ev.publish("start", {"input": "echo bye", "tools": ["slow_echo"]})
        await asyncio.wait_for(provider.slow_started.wait(), 20)
        began = time.monotonic()
        code = await asyncio.to_thread(own_system.terminate, 40.0)
        took = time.monotonic() - began
        assert code == 0, own_system.logs()[-3000:]
        assert took < 30, f"shutdown took {took:.1f}s"
        # The in-flight tool call was allowed to finish and its result recorded (its
        # `tool.result` event goes out with the router's transition, after the restart).
        redis = aioredis.Redis.from_url(own_system.get_redis_url())
        assert len(await redis.keys(keys.step_record(keys.tool_call_step(sid, "*")))) == 1
        await redis.aclose()
        await asyncio.to_thread(own_system.start_loopwire)
        ended = await ev.wait_for("run.ended", timeout=60)

    assert ended["status"] == "completed" and ended["final_text"] == "It said: echo: bye"
    assert [c[0] for c in provider.calls].count("slow_echo") == 1, "the finished call was not repeated"
    assert len(fake.message_requests) == 2
    transcript = (await query(own_nc, "transcript.get", {"session_id": sid}))["events"]
    assert Counter(e["kind"] for e in transcript) == Counter(
        {"run.started": 1, "phase.changed": 2, "user.message": 2, "message": 2, "tool.call": 1, "tool.result": 1, "run.ended": 1})
    await svc.stop()
