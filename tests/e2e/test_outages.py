"""Outages of Redis and NATS, on the layout users deploy (one `loopwire serve` process per
service, two routers): accepted input and runs are delayed, never lost; work that still
cannot be done after the tolerance ends its run `failed` / `undeliverable` and the session
takes a new `start` (docs/deployment.md, "Failures")."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families

from loopwire.shared.contract import keys
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import query

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPLIT = "split"


async def start(nc: NatsClient, sid: str, body: dict[str, Any]) -> dict[str, Any]:
    ack = await nc.request(f"loopwire.in.{sid}.start", json.dumps(body).encode(), timeout=10,
                           headers={"Nats-Msg-Id": uuid.uuid4().hex})
    reply = json.loads(ack.data)
    assert reply.get("stream") == "LOOPWIRE_INGRESS", f"durably accepted: {reply}"
    return reply


async def ended(nc: NatsClient, sid: str, timeout: float, count: int = 1) -> list[dict[str, Any]]:
    """The session's `run.ended` events, from its transcript (polled: a live subscription
    may miss events while NATS is away), once there are `count` of them."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: list[dict[str, Any]] = []
    while asyncio.get_running_loop().time() < deadline:
        try:
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            last = events
            runs = [e for e in events if e["kind"] == "run.ended"]
            if len(runs) >= count:
                return runs
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"session {sid}: {count} run.ended not seen in {timeout}s; events: "
                       f"{[e['kind'] for e in last]}")


async def status(nc: NatsClient, sid: str) -> str:
    return str((await query(nc, "session.get", {"session_id": sid}))["status"])


@pytest.mark.timeout(240)
async def test_redis_stopped_40s_mid_tool_loses_no_run_and_no_accepted_start(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    # A tolerance above the outage, short enough that redeliveries come every few seconds.
    with started_system(fake_anthropic, layout=SPLIT, LOOPWIRE_OUTAGE_TOLERANCE_S="60") as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            provider.slow_delay_s = 3.0
            await wait_for_tools(nc, {"slow_echo"})
            fake.script("*", [
                {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                {"text": "It said: echo: hi"},
            ])
            await start(nc, "redis-out-1", {"input": "echo hi", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 30)
            assert system.redis is not None
            await asyncio.to_thread(system.redis.halt)
            # Accepted while Redis is away: JetStream holds it, the router applies it later.
            await start(nc, "redis-out-2", {"input": "just say hi", "tools": []})
            await asyncio.sleep(40)
            provider.slow_delay_s = 0.1
            await asyncio.to_thread(system.redis.resume)

            first = await ended(nc, "redis-out-1", timeout=120)
            assert first[0]["status"] == "completed"
            second = await ended(nc, "redis-out-2", timeout=60)
            assert second[0]["status"] == "completed"
            ids = {c[2]["Loopwire-Tool-Use-Id"] for c in provider.calls if c[0] == "slow_echo"}
            assert len(ids) == 1, "every attempt at the call carried the same idempotency key"
            for sid in ("redis-out-1", "redis-out-2"):
                assert await status(nc, sid) == "idle"
                events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
                seqs = [e["seq"] for e in events]
                assert seqs == sorted(set(seqs)), "every stored event once"
            await svc.stop()


@pytest.mark.timeout(180)
async def test_nats_restarted_with_its_store_mid_run_the_run_completes(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic, layout=SPLIT) as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            provider.slow_delay_s = 2.0
            await wait_for_tools(nc, {"slow_echo"})
            fake.script("*", [
                {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                {"text": "It said: echo: hi"},
            ])
            await start(nc, "nats-out-1", {"input": "echo hi", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 30)
            assert system.nats is not None
            await asyncio.to_thread(system.nats.halt)
            await asyncio.sleep(2)
            await asyncio.to_thread(system.nats.resume)
            back = asyncio.get_running_loop().time()
            runs = await ended(nc, "nats-out-1", timeout=120)
            took = asyncio.get_running_loop().time() - back
            assert runs[0]["status"] == "completed" and runs[0]["final_text"] == "It said: echo: hi"
            # The provider's reply lost to the restart was asked for again, not waited out
            # for the tool's timeout (30 s here) and recorded as "timed out".
            assert took < 25, f"the run took {took:.0f} s after NATS came back"
            events = (await query(nc, "transcript.get", {"session_id": "nats-out-1"}))["events"]
            (result,) = [e for e in events if e["kind"] == "tool.result"]
            assert result["content"] == "echo: hi" and not result["is_error"]
            assert await status(nc, "nats-out-1") == "idle"
            await svc.stop()


@pytest.mark.timeout(240)
async def test_an_outage_longer_than_the_tolerance_ends_the_run_and_frees_the_session(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic, layout=SPLIT, LOOPWIRE_OUTAGE_TOLERANCE_S="10",
                        LOOPWIRE_LLM_TIMEOUT_S="5", LOOPWIRE_TOOL_TIMEOUT_S="5") as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            provider.slow_delay_s = 3.0
            await wait_for_tools(nc, {"slow_echo"})
            fake.script("*", [
                {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                {"text": "It said: echo: hi"},
                {"text": "Hello again."},
            ])
            sid = "too-long"
            await start(nc, sid, {"input": "echo hi", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 30)
            assert system.redis is not None
            await asyncio.to_thread(system.redis.halt)
            await asyncio.sleep(45)
            provider.slow_delay_s = 0.1
            await asyncio.to_thread(system.redis.resume)

            (first,) = await ended(nc, sid, timeout=90)
            # Longer than the tolerance and than the longest a step may take (the timeouts
            # above plus an ack wait): the run is given up, as the README says.
            assert (first["status"], first.get("reason")) == ("failed", "undeliverable"), first
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            errors = [e for e in events if e["kind"] == "error"]
            assert errors and errors[-1]["code"] == "undeliverable", errors
            assert await status(nc, sid) == "idle", "the session is not left running"
            fake.reset()
            fake.script("*", [{"text": "Hello again."}])
            await start(nc, sid, {"input": "hello again", "tools": []})
            runs = await ended(nc, sid, timeout=60, count=2)
            assert (runs[1]["status"], runs[1]["final_text"]) == ("completed", "Hello again."), runs[1]
            await svc.stop()


@pytest.mark.timeout(120)
async def test_a_step_nobody_takes_is_ended_by_the_watchdog(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    # Every tools process is gone: the step's message waits in JetStream, never delivered,
    # so it never reaches max deliveries. The router's watchdog ends the run.
    with started_system(fake_anthropic, layout=SPLIT, LOOPWIRE_OUTAGE_TOLERANCE_S="5",
                        LOOPWIRE_LLM_TIMEOUT_S="5", LOOPWIRE_TOOL_TIMEOUT_S="5") as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            await wait_for_tools(nc, {"add"})
            system.kill_service("tools")
            fake.script("*", [
                {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                {"text": "Hello again."},
            ])
            sid = "nobody-takes-it"
            await start(nc, sid, {"input": "1 + 2?", "tools": ["add"]})
            (first,) = await ended(nc, sid, timeout=60)
            assert first["status"] == "failed" and first["reason"] == "undeliverable"
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            (error,) = [e for e in events if e["kind"] == "error"]
            assert error["code"] == "undeliverable" and "no progress" in error["message"]
            assert provider.calls == []
            assert await status(nc, sid) == "idle"
            await start(nc, sid, {"input": "hello again", "tools": []})
            runs = await ended(nc, sid, timeout=60, count=2)
            assert runs[1]["status"] == "completed" and runs[1]["final_text"] == "Hello again."
            await svc.stop()


@pytest.mark.timeout(90)
async def test_after_redis_lost_its_data_a_session_seq_continues_from_the_events_stream(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    import redis.asyncio as aioredis

    with started_system(fake_anthropic) as system:
        async with connected(system) as nc:
            fake.script("*", [{"text": "First."}, {"text": "Second."}])
            sid = "lost-state"
            await start(nc, sid, {"input": "one", "tools": []})
            await ended(nc, sid, timeout=30)
            before = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            last = max(e["seq"] for e in before)
            r = aioredis.Redis.from_url(system.get_redis_url())
            await r.flushall()  # what a restart of a Redis without persistence leaves
            await r.aclose()
            got: list[int] = []

            async def on_event(msg: Any) -> None:
                got.append(json.loads(msg.data)["seq"])

            sub = await nc.subscribe(f"loopwire.out.{sid}.>", cb=on_event)
            await start(nc, sid, {"input": "two", "tools": []})
            # The session's transcript is restored from the events stream with it
            # (services/router/shell/rebuild.py): the first run's end, then the second's.
            run = (await ended(nc, sid, timeout=30, count=2))[-1]
            await sub.unsubscribe()
            assert run["final_text"] == "Second." and run["seq"] > last
            assert got and min(got) == last + 1, "the new events continue the old seqs, never from 1"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("layout", ["up", SPLIT])
async def test_a_step_that_fails_on_the_sessions_own_history_ends_the_run_and_never_wedges_it(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic, layout: str) -> None:
    # The session's stored history carries a malformed reference block (shared/stores/blobs.py;
    # the ingress and the tools service refuse one, so here it is written into Redis, as a
    # history stored by an older version or damaged would hold it): every generation of
    # the session fails on its history, deterministically. It is given up after
    # LOOPWIRE_FAULT_MAX_DELIVER deliveries, not retried for the outage tolerance.
    import redis.asyncio as aioredis

    with started_system(fake_anthropic, layout=layout) as system:
        async with connected(system) as nc:
            fake.script("*", [{"text": "First."}, {"text": "Never reached."}])
            sid = f"poisoned-{layout}"
            await start(nc, sid, {"input": "hi", "tools": []})
            (first,) = await ended(nc, sid, timeout=30)
            assert first["status"] == "completed"
            redis = aioredis.from_url(system.get_redis_url())
            await redis.lset(keys.session_history(sid), 0, json.dumps({"role": "user", "content": [
                {"type": "text", "text": "hi", "loopwire_ref": "not a reference"}]}))
            await redis.aclose()
            began = asyncio.get_running_loop().time()
            await start(nc, sid, {"input": "go on", "tools": []})
            runs = await ended(nc, sid, timeout=90, count=2)
            took = asyncio.get_running_loop().time() - began
            assert runs[1]["status"] == "failed" and runs[1]["reason"] == "undeliverable"
            assert took < 60, "given up after a few deliveries, not the 300 s tolerance"
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            (error,) = [e for e in events if e["kind"] == "error"]
            assert error["code"] == "undeliverable" and "fault: " in error["message"]
            assert await status(nc, sid) == "idle"
            # The session takes its next start; that run meets the same history and ends
            # the same way, fast: nothing is left running.
            await start(nc, sid, {"input": "again", "tools": []})
            runs = await ended(nc, sid, timeout=90, count=3)
            assert runs[2]["status"] == "failed" and await status(nc, sid) == "idle"


async def eventually(read: Any, expected: float, timeout: float = 5.0) -> float:
    """`read()` once it returns `expected`, or its last value after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    value = read()
    while value != expected and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
        value = read()
    return value


def llm_steps(system: Any, layout: str, outcome: str) -> float:
    """loopwire_steps_total{service="llm", outcome} of the process(es) running the llm."""
    processes = system.of_service("up" if layout == "up" else "llm")
    value = 0.0
    for process in processes:
        with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5) as resp:
            for family in text_string_to_metric_families(resp.read().decode()):
                value += sum(s.value for s in family.samples if s.name == "loopwire_steps_total"
                             and s.labels.get("service") == "llm" and s.labels.get("outcome") == outcome)
    return value


@pytest.mark.timeout(150)
@pytest.mark.parametrize("layout", ["up", SPLIT])
async def test_a_hop_that_fails_is_retried_on_its_own_and_redoes_no_earlier_hop(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic, layout: str) -> None:
    # Redis goes away while the tool call runs: the tools step cannot record its result.
    # Between separate processes that step is its own JetStream message and is redelivered
    # alone; in `loopwire up` it is a hop of the run's work chain, and it goes to JetStream
    # as its own message too (shared/runtime/chain.py): the generation before it is not
    # redone (its record is not even read again), in either layout.
    with started_system(fake_anthropic, layout=layout, LOOPWIRE_OUTAGE_TOLERANCE_S="60") as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            provider.slow_delay_s = 2.0
            await wait_for_tools(nc, {"slow_echo"})
            fake.script("*", [
                {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                {"text": "It said: echo: hi"},
            ])
            sid = f"hop-fails-{layout}"
            await start(nc, sid, {"input": "echo hi", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 30)
            assert system.redis is not None
            await asyncio.to_thread(system.redis.halt)
            await asyncio.sleep(8)
            provider.slow_delay_s = 0.1
            await asyncio.to_thread(system.redis.resume)
            (run,) = await ended(nc, sid, timeout=90)
            assert run["status"] == "completed" and run["final_text"] == "It said: echo: hi"
            assert len(fake.message_requests) == 2, "each generation asked the model once"
            # In `loopwire up` the llm handler counts its step after the router, called in
            # process, has ended the run: the counter may trail run.ended by a moment.
            assert await eventually(lambda: llm_steps(system, layout, "ok"), 2) == 2
            assert llm_steps(system, layout, "replayed") == 0, "no earlier hop was redone"
            calls = [c for c in provider.calls if c[0] == "slow_echo"]
            assert len({c[2]["Loopwire-Tool-Use-Id"] for c in calls}) == 1
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            assert [e["seq"] for e in events] == sorted({e["seq"] for e in events}), "every stored event once"
            assert await status(nc, sid) == "idle"
            await svc.stop()
