"""Crash: kill -9 loopwire while a slow tool call is in flight, start it again.

The run finishes; the model is not called again for a turn whose answer was recorded;
the tool is called again only because its result was never recorded, and then with the
same Loopwire-Tool-Use-Id; the transcript has every event once."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import serve_tools, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


async def test_kill_9_during_a_slow_tool_loses_and_repeats_nothing(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    provider, svc = await serve_tools(own_nc)
    provider.slow_delay_s = 5.0
    await wait_for_tools(own_nc, {"slow_echo"})
    fake.script("*", [
        {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
        {"text": "It said: echo: hi"},
    ])
    sid = "crash-1"
    async with SessionEvents(own_nc, sid) as ev:
        await ev.publish("start", {"input": "echo hi", "tools": ["slow_echo"]})
        await asyncio.wait_for(provider.slow_started.wait(), 20)
        own_system.kill()
        provider.slow_delay_s = 0.1  # the retried call answers quickly
        await asyncio.to_thread(own_system.start_loopwire)
        ended = await ev.wait_for("run.ended", timeout=60)

    assert ended["status"] == "completed" and ended["final_text"] == "It said: echo: hi"
    assert len(fake.message_requests) == 2, "each turn's model answer was recorded and not asked for again"

    slow_calls = [c for c in provider.calls if c[0] == "slow_echo"]
    assert len(slow_calls) == 2, "the unrecorded tool call ran again after the crash"
    ids = {c[2]["Loopwire-Tool-Use-Id"] for c in slow_calls}
    assert len(ids) == 1, "with the same idempotency key"

    transcript = (await query(own_nc, "transcript.get", {"session_id": sid}))["events"]
    kinds = Counter(e["kind"] for e in transcript)
    assert kinds == Counter({"run.started": 1, "user.message": 2, "message": 2, "tool.call": 1, "tool.result": 1, "run.ended": 1})
    seqs = [e["seq"] for e in transcript]
    assert seqs == sorted(set(seqs))
    await svc.stop()
