"""A rolling restart under load, as Kubernetes rolls a Deployment (maxSurge 1,
maxUnavailable 0): in the deployed layout (one `loopwire serve` per service, two routers),
while 20 sessions of 20 tool-turns each run against a model that takes a second, every
process in turn gets its replacement started first and is then sent SIGTERM. Each drains
and exits 0 within LOOPWIRE_DRAIN_TIMEOUT_S, and every run completes, no tool call made
twice and no event lost or repeated."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from loopwire.testing.processes import LoopwireProcess
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SESSIONS = 20
TURNS = 20
"""Enough that the runs outlast the roll: six processes, each replaced after its
replacement is ready and drained, take well over the ten turns' 13 s on a loaded machine."""
DRAIN_S = 20.0
MODEL_DELAY_S = 1.2


def tool_rounds(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               and any(b.get("type") == "tool_result" for b in m["content"]))


def tool_turns(body: dict[str, Any]) -> dict[str, Any]:
    done = tool_rounds(body)
    if done < TURNS:
        return {"text": f"Step {done}.", "tool_use": [{"name": "add", "input": {"a": done, "b": 1}}],
                "delay_s": MODEL_DELAY_S}
    return {"text": f"All {TURNS} steps done.", "delay_s": MODEL_DELAY_S}


async def test_each_process_replaced_under_load_drains_and_every_run_completes(fake: FakeAnthropic) -> None:
    fake.responder = tool_turns
    with started_system(fake, layout="split", LOOPWIRE_DRAIN_TIMEOUT_S=str(DRAIN_S)) as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            await wait_for_tools(nc, {"add"})
            sids = [f"roll-{uuid.uuid4().hex[:8]}-{i}" for i in range(SESSIONS)]
            followers = [SessionEvents(nc, sid) for sid in sids]
            for ev in followers:
                await ev.__aenter__()
            try:
                for ev in followers:
                    await ev.publish("start", {"input": f"count to {TURNS}", "tools": ["add"]})
                await asyncio.gather(*(ev.wait_for("tool.result") for ev in followers))
                stops: list[tuple[str, int, float]] = []
                for old in list(system.processes):
                    new = LoopwireProcess(old.command)
                    system.processes.append(new)
                    await asyncio.to_thread(system.start_loopwire)  # the replacement is ready first
                    began = time.monotonic()
                    code = await asyncio.to_thread(old.terminate, DRAIN_S + 15)
                    stops.append((old.command, code, time.monotonic() - began))
                    assert code == 0, f"`loopwire {old.command}` exited {code}:\n{old.logs()[-3000:]}"
                    system.processes.remove(old)
                in_flight = sum(1 for ev in followers if not ev.of("run.ended"))
                ended = await asyncio.gather(*(ev.wait_for("run.ended", timeout=120) for ev in followers))
            finally:
                for ev in followers:
                    await ev.__aexit__()
            await svc.stop()
    assert len(stops) == 6
    for command, _code, took in stops:
        assert took < DRAIN_S, f"`loopwire {command}` took {took:.1f} s to stop"
    assert in_flight > 0, "the roll ended after the load: it tested nothing"
    assert [e["status"] for e in ended] == ["completed"] * SESSIONS, [e.get("reason") for e in ended]
    assert all(e["final_text"].endswith(f"All {TURNS} steps done.") for e in ended)
    ids = Counter(headers.get("Loopwire-Tool-Use-Id") for _name, _body, headers in provider.calls)
    assert len(ids) == SESSIONS * TURNS and set(ids.values()) == {1}, "a tool call was made twice"
    for ev in followers:
        ev.check_bodies()
        ev.check_each_seq_once()
        assert len(ev.of("run.started")) == 1 and len(ev.of("run.ended")) == 1
        assert len(ev.of("tool.result")) == TURNS
