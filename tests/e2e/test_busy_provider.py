"""A busy tool provider gets each call once. A Python `nats.micro` endpoint serves one
request at a time, so calls sent together wait in its queue; a call that waits longer than
LOOPWIRE_TOOL_ATTEMPT_TIMEOUT_S is still not lost while its provider is there, and is not
sent again. A provider instance that goes away with a call is another matter: the call is
sent again, with the same Loopwire-Tool-Use-Id, to the instance that is there.

The attempt timeout is lowered (3 s, a 1.5 s tool) so the queue's wait outgrows it fast:
eight calls at once, the last ones wait about 10 s."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pytest
from nats import micro

from loopwire.client import LoopwireClient
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, started_system, wait_for_tools
from .events import query

pytestmark = pytest.mark.e2e

TOOL_S = 1.5
CALLS = 8
SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


def crunch_then_answer(body: dict) -> dict:
    """Turn 1 crunches the number the user gave; turn 2 (the result came back) says it."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        result = next(b for b in last if b.get("type") == "tool_result")["content"]
        text = result if isinstance(result, str) else "".join(b.get("text", "") for b in result)
        return {"text": f"Said: {text}."}
    said = last if isinstance(last, str) else "".join(b.get("text", "") for b in last if b.get("type") == "text")
    n = int(said.rsplit(" ", 1)[-1])
    return {"text": "Crunching.", "tool_use": [{"name": "crunch", "input": {"n": n}}]}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("layout", ["up", "split"])
async def test_a_busy_serial_provider_gets_each_call_once(fake_anthropic: FakeAnthropic, fake: FakeAnthropic,
                                                          layout: str) -> None:
    with started_system(fake_anthropic, layout=layout, LOOPWIRE_TOOL_TIMEOUT_S="60",
                        LOOPWIRE_TOOL_ATTEMPT_TIMEOUT_S="3") as system:
        async with connected(system) as nc:
            received: list[str] = []
            svc = await micro.add_service(nc, name="serial", version="1.0.0")

            async def crunch(req: micro.Request) -> None:
                # nats.micro awaits this before it takes the endpoint's next request.
                received.append((req.headers or {})["Loopwire-Tool-Use-Id"])
                await asyncio.sleep(TOOL_S)
                n = json.loads(req.data)["n"]
                await req.respond(json.dumps({"content": f"crunched {n}", "is_error": False}).encode())

            await svc.add_endpoint(name="crunch", handler=crunch, metadata={
                "loopwire.tool": "crunch", "description": "Crunch a number (slowly).", "input_schema": SCHEMA})
            await wait_for_tools(nc, {"crunch"})
            fake.responder = crunch_then_answer
            async with LoopwireClient(nc) as lw:
                began = time.monotonic()
                ended = await asyncio.gather(*(
                    lw.run(f"busy-{layout}-{i}", {"input": f"crunch {layout} {i}", "tools": ["crunch"]}, timeout=120)
                    for i in range(CALLS)))
                took = time.monotonic() - began
            assert [e["status"] for e in ended] == ["completed"] * CALLS, ended
            assert [e["final_text"] for e in ended] == [f"Said: crunched {i}." for i in range(CALLS)]
            assert took > CALLS * TOOL_S, "the calls queued behind one another in the provider"
            assert len(received) == CALLS and set(Counter(received).values()) == {1}, \
                f"each Loopwire-Tool-Use-Id once: {Counter(received)}"
            for i in range(CALLS):
                results = [e for e in (await query(nc, "transcript.get", {"session_id": f"busy-{layout}-{i}"}))["events"]
                           if e["kind"] == "tool.result"]
                assert [(r["content"], r["is_error"]) for r in results] == [(f"crunched {i}", False)]
            await svc.stop()
