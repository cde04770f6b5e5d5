"""A tool call lost with its provider is sent again, not waited out; a client following a session with an
ordered consumer (loopwire.client, what `loopwire run` uses) sees each event once across a
kill -9."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from nats import micro

from loopwire.client import LoopwireClient
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import query

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
async def test_a_call_lost_with_its_provider_is_sent_again_with_the_same_tool_use_id(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    # The provider instance takes the first request and goes away without answering it (a
    # crash mid-call); once discovery has forgotten it and LOOPWIRE_TOOL_ATTEMPT_TIMEOUT_S
    # has passed, the call goes again to the instance that took its place, and is answered.
    with started_system(fake_anthropic, layout="split", LOOPWIRE_TOOL_TIMEOUT_S="120",
                        LOOPWIRE_TOOL_ATTEMPT_TIMEOUT_S="1.5") as system:
        async with connected(system) as nc:
            seen: list[dict[str, str]] = []
            took_it = asyncio.Event()
            metadata = {"loopwire.tool": "lookup", "description": "Look something up.",
                        "input_schema": json.dumps({"type": "object", "properties": {"q": {"type": "string"}}})}
            first = await micro.add_service(nc, name="lossy", version="1.0.0")

            async def swallow(req: micro.Request) -> None:
                seen.append(dict(req.headers or {}))
                took_it.set()  # this reply never comes

            async def lookup(req: micro.Request) -> None:
                seen.append(dict(req.headers or {}))
                await req.respond(json.dumps({"content": "found it", "is_error": False}).encode())

            await first.add_endpoint(name="lookup", handler=swallow, metadata=metadata)
            await wait_for_tools(nc, {"lookup"})
            fake.script("*", [
                {"text": "Looking.", "tool_use": [{"name": "lookup", "input": {"q": "x"}}]},
                {"text": "It says: found it"},
            ])
            async with LoopwireClient(nc) as lw:
                began = time.monotonic()
                running = asyncio.create_task(lw.run("lossy-1", {"input": "look up x", "tools": ["lookup"]}, timeout=60))
                await asyncio.wait_for(took_it.wait(), 30)
                second = await micro.add_service(nc, name="lossy", version="1.0.0")
                await second.add_endpoint(name="lookup", handler=lookup, metadata=metadata)
                await first.stop()
                ended = await running
                took = time.monotonic() - began
            assert ended["status"] == "completed" and ended["final_text"] == "It says: found it"
            assert len(seen) == 2, "sent once more, not waited out for the tool's 120 s"
            assert seen[0]["Loopwire-Tool-Use-Id"] == seen[1]["Loopwire-Tool-Use-Id"]
            assert took < 30
            results = [e for e in (await query(nc, "transcript.get", {"session_id": "lossy-1"}))["events"]
                       if e["kind"] == "tool.result"]
            assert [r["content"] for r in results] == ["found it"] and not results[0]["is_error"]
            await second.stop()


@pytest.mark.timeout(150)
async def test_an_ordered_consumer_client_sees_each_event_once_across_a_kill_9(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic) as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            provider.slow_delay_s = 5.0
            await wait_for_tools(nc, {"slow_echo", "add"})
            fake.script("*", [
                {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                {"text": "Done: 3 and echo: hi"},
            ])
            sid = "follow-kill"
            got: list[dict[str, Any]] = []
            async with LoopwireClient(nc) as lw:
                async with await lw.follow(sid, new_only=True) as events:
                    await lw.publish(sid, "start", {"input": "add, then echo", "tools": ["add", "slow_echo"]},
                                     msg_id="follow-kill-start")

                    async def collect() -> None:
                        async for event in events:
                            got.append(event)
                            if event["kind"] == "run.ended":
                                return

                    collecting = asyncio.create_task(collect())
                    await asyncio.wait_for(provider.slow_started.wait(), 30)
                    system.kill()  # kill -9 mid-tool: recovery publishes events again
                    provider.slow_delay_s = 0.1
                    await asyncio.to_thread(system.start_loopwire)
                    await asyncio.wait_for(collecting, 90)

            assert got[-1]["kind"] == "run.ended" and got[-1]["status"] == "completed"
            seqs = [e["seq"] for e in got]
            assert seqs == sorted(set(seqs)), "each seq once, in order"
            stored = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            followed = {e["seq"]: e["kind"] for e in got}
            # Ephemeral kinds (text.delta, generating, tools.progress) are followed but not stored.
            assert {e["seq"]: followed.get(e["seq"]) for e in stored} == {e["seq"]: e["kind"] for e in stored}, \
                "every stored event, once"
            await svc.stop()
