"""Execution hints and dependencies through the contract: a nats.micro provider declares
`loopwire.execution` and `loopwire.depends_on` in its endpoint metadata, and the times
at which its calls start and end show the turn's calls staged accordingly; a turn whose
workflow cannot be built (a dependency cycle, a dependency on a tool nobody serves)
fails whole: an error result per call, none run, the model reads why and the run goes on."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from nats import micro
from nats.aio.client import Client as NatsClient

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import wait_for_tools
from .events import SessionEvents

pytestmark = pytest.mark.e2e

NAP_S = 0.4
"""How long each call takes at the provider: long enough that overlap (or its absence)
is plain in the timestamps on a busy machine."""


@dataclass
class Timeline:
    """(tool, label) -> (start, end) at the provider, on this process's monotonic clock."""

    spans: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def __getitem__(self, key: tuple[str, str]) -> tuple[float, float]:
        return self.spans[key]

    def before(self, first: tuple[str, str], then: tuple[str, str]) -> bool:
        return self.spans[first][1] <= self.spans[then][0]

    def overlap(self, a: tuple[str, str], b: tuple[str, str]) -> bool:
        return self.spans[a][0] < self.spans[b][1] and self.spans[b][0] < self.spans[a][1]


TOOLS: dict[str, dict[str, str]] = {
    "hint_par": {},
    "hint_seq": {"loopwire.execution": "sequential"},
    "hint_excl": {"loopwire.execution": "exclusive"},
    "hint_after_par": {"loopwire.depends_on": "hint_par"},
    "hint_cyc_a": {"loopwire.depends_on": "hint_cyc_b"},
    "hint_cyc_b": {"loopwire.depends_on": "hint_cyc_a"},
    "hint_orphan": {"loopwire.depends_on": "hint_nobody_serves"},
}


@pytest.fixture
async def hinted_provider(nc: NatsClient) -> AsyncIterator[Timeline]:
    timeline = Timeline()
    svc = await micro.add_service(nc, name="e2e-hints", version="1.0.0")

    tasks: set[asyncio.Task[None]] = set()

    def handler(tool: str) -> Any:
        async def work(req: micro.Request) -> None:
            label = json.loads(req.data)["label"]
            started = time.monotonic()
            await asyncio.sleep(NAP_S)
            timeline.spans[(tool, label)] = (started, time.monotonic())
            await req.respond(json.dumps({"content": f"{tool} {label} done", "is_error": False}).encode())

        async def handle(req: micro.Request) -> None:
            # nats-py runs one subscription's callbacks one at a time: a task per request
            # lets two calls of one endpoint overlap, as a real provider's would.
            task = asyncio.create_task(work(req))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return handle

    schema = json.dumps({"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]})
    for tool, hints in TOOLS.items():
        await svc.add_endpoint(name=tool, handler=handler(tool), metadata={
            "loopwire.tool": tool, "description": f"{tool} (takes a moment)", "input_schema": schema, **hints})
    yield timeline
    await svc.stop()


def uses(*calls: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": tool, "input": {"label": label}} for tool, label in calls]


@pytest.mark.timeout(60)
async def test_calls_are_staged_by_the_providers_hints(nc: NatsClient, fake: FakeAnthropic,
                                                       hinted_provider: Timeline) -> None:
    await wait_for_tools(nc, set(TOOLS))
    fake.script("*", [
        {"text": "Sequential beside parallel.", "tool_use": uses(
            ("hint_seq", "s1"), ("hint_par", "p1"), ("hint_seq", "s2"), ("hint_par", "p2"))},
        {"text": "One exclusive.", "tool_use": uses(("hint_par", "p3"), ("hint_excl", "x1"), ("hint_par", "p4"))},
        {"text": "A dependency, named first.", "tool_use": uses(("hint_after_par", "d1"), ("hint_par", "p5"))},
        {"text": "A cycle.", "tool_use": uses(("hint_cyc_a", "c1"), ("hint_cyc_b", "c2"), ("hint_par", "p6"))},
        {"text": "An unknown dependency.", "tool_use": uses(("hint_par", "p7"), ("hint_orphan", "o1"))},
        {"text": "All done.", "stop_reason": "end_turn"},
    ])
    s = f"e2e-hints-{uuid.uuid4().hex[:8]}"
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "run the workflow", "tools": sorted(TOOLS)})
        ended = await ev.wait_for("run.ended", timeout=45)
    assert ended["status"] == "completed" and ended["final_text"] == "All done.", ended
    t = hinted_provider

    # Turn 1: the sequential calls one after the other, the parallel ones beside them.
    assert t.before(("hint_seq", "s1"), ("hint_seq", "s2"))
    assert t.overlap(("hint_seq", "s1"), ("hint_par", "p1")) and t.overlap(("hint_seq", "s1"), ("hint_par", "p2"))
    # Turn 2: the exclusive call after the call before it, and before the call after it.
    assert t.before(("hint_par", "p3"), ("hint_excl", "x1")) and t.before(("hint_excl", "x1"), ("hint_par", "p4"))
    # Turn 3: the dependent call waits for the call it depends on, though named first.
    assert t.before(("hint_par", "p5"), ("hint_after_par", "d1"))
    # Turn 4: the cycle fails the whole turn: no call reaches the provider, not even the
    # one outside the cycle; each gets an error result that names the cycle.
    assert not {("hint_cyc_a", "c1"), ("hint_cyc_b", "c2"), ("hint_par", "p6")} & set(t.spans)
    turn4 = [r for r in ev.of("tool.result") if r["turn"] == 4]
    assert len(turn4) == 3 and all(r["is_error"] for r in turn4)
    assert all("a dependency cycle: hint_cyc_a -> hint_cyc_b -> hint_cyc_a" in r["content"] for r in turn4)
    # Turn 5: a dependency on a tool nobody serves: the same.
    assert ("hint_par", "p7") not in t.spans
    turn5 = [r for r in ev.of("tool.result") if r["turn"] == 5]
    assert len(turn5) == 2 and all(r["is_error"] and "hint_nobody_serves" in r["content"] for r in turn5)
    # The model read those results in its next requests.
    turn4_results = fake.message_requests[-2]["messages"][-1]["content"]
    assert [b.get("is_error", False) for b in turn4_results if b["type"] == "tool_result"] == [True, True, True]
    assert len(t.spans) == 9, "turns 1-3 ran all their calls, turns 4 and 5 none"
