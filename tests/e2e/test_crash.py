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

from . import conftest
from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

own_system = conftest.own_layout_system  # each test here runs on every layout


async def test_kill_9_during_a_slow_tool_loses_and_repeats_nothing(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    await slow_tool_crash(own_system, own_nc, fake)


async def test_the_same_with_every_hop_on_jetstream(fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    # As between `loopwire serve` processes: no in-process hand-overs.
    with started_system(fake_anthropic, LOOPWIRE_LOCAL_HANDOVER="false") as system:
        async with connected(system) as nc:
            await slow_tool_crash(system, nc, fake)


async def slow_tool_crash(own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
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
    assert kinds == Counter({"run.started": 1, "phase.changed": 2, "user.message": 2, "message": 2, "tool.call": 1,
                             "tool.result": 1, "run.ended": 1})
    seqs = [e["seq"] for e in transcript]
    assert seqs == sorted(set(seqs))
    await svc.stop()


async def test_kill_9_during_a_slow_model_stream_retracts_and_answers_once(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    # In `loopwire up` the generation runs inside memory's handler (an in-process hand-over),
    # so the message that comes back after the crash is memory's: it is assembled again and
    # the model asked again (the first answer was never recorded), after a `retracted` event
    # that voids the text streamed before the crash.
    fake.script("*", [
        {"chunks": ["Thinking ", "slowly ", "about ", "it ", "..."], "chunk_delay_s": 1.0},
        {"text": "Done thinking."},
    ])
    sid = "crash-stream"
    async with SessionEvents(own_nc, sid) as ev:
        await ev.publish("start", {"input": "think", "tools": []})
        await ev.wait_for("text.delta", timeout=20)
        own_system.kill()
        await asyncio.to_thread(own_system.start_loopwire)
        ended = await ev.wait_for("run.ended", timeout=60)

    assert ended["status"] == "completed" and ended["final_text"] == "Done thinking."
    assert len(fake.message_requests) == 2
    transcript = (await query(own_nc, "transcript.get", {"session_id": sid}))["events"]
    kinds = [e["kind"] for e in transcript]
    assert kinds == ["run.started", "phase.changed", "user.message", "retracted", "message", "phase.changed",
                     "run.ended"]
    assert [e["seq"] for e in transcript] == sorted({e["seq"] for e in transcript})


async def test_kill_9_in_a_later_turn_recovers_the_chain_from_its_root(
        own_system: LoopwireContainer, own_nc: NatsClient, fake: FakeAnthropic) -> None:
    # In `loopwire up` the second generation is a hop of the work chain rooted at the
    # run's first `memory.assemble` message (shared/runtime/chain.py); nothing of turn 2 is on
    # JetStream. After the crash that root comes back: its generation is answered from its
    # record, the router replays the session's current outbox (turn 2's generation), and the
    # model is asked again for that turn only, after a `retracted` for its partial stream.
    provider, svc = await serve_tools(own_nc)
    await wait_for_tools(own_nc, {"add"})
    fake.script("*", [
        {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
        {"chunks": ["It ", "is ", "three ", "..."], "chunk_delay_s": 1.0},
        {"text": "It is 3."},
    ])
    sid = "crash-later-turn"
    async with SessionEvents(own_nc, sid) as ev:
        await ev.publish("start", {"input": "1 + 2?", "tools": ["add"]})
        await ev.wait_for("tool.result", timeout=20)
        await ev.wait_for("text.delta", timeout=20, turn=2)
        own_system.kill()
        await asyncio.to_thread(own_system.start_loopwire)
        ended = await ev.wait_for("run.ended", timeout=60)

    assert ended["status"] == "completed" and ended["final_text"] == "It is 3."
    assert len(fake.message_requests) == 3, "turn 1's answer came from its record"
    assert [c[0] for c in provider.calls] == ["add"], "the recorded tool call did not run again"
    transcript = (await query(own_nc, "transcript.get", {"session_id": sid}))["events"]
    assert [e["kind"] for e in transcript] == ["run.started", "phase.changed", "user.message", "message", "tool.call",
                                               "tool.result", "user.message", "retracted", "message", "phase.changed",
                                               "run.ended"]
    assert [e["seq"] for e in transcript] == sorted({e["seq"] for e in transcript})
    await svc.stop()
