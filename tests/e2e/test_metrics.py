"""A run with a fallback and a loop, then a scrape of `loopwire up`'s /metrics: the named
counters moved by exactly what the events say, and promtool accepts the endpoint."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections import Counter

import pytest
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic
from tests.unit.shared.observability.test_promtool import find_promtool

from .conftest import ToolProvider, wait_for_tools
from .events import SessionEvents

pytestmark = pytest.mark.e2e

PRIMARY, BACKUP = "claude-metrics-primary", "claude-metrics-backup"


def scrape(system: LoopwireContainer) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with urllib.request.urlopen(f"{system.metrics_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def total(samples: dict, name: str, **match: str) -> float:
    return sum(v for (n, labels), v in samples.items()
               if n == name and all(dict(labels).get(k) == x for k, x in match.items()))


async def test_loop_and_fallback_move_the_counters(system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic,
                                                   tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.fail_next(529, n=None, model=PRIMARY)
    same_call = {"text": "Adding again.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 1}}]}
    fake.script(BACKUP, [same_call] * 12 + [{"text": "I keep getting 2."}] * 3)
    _, before = scrape(system)
    async with SessionEvents(nc, "metrics-1") as ev:
        await ev.publish("start", {"input": "add 1 and 1 forever", "tools": ["add"],
                                   "model": {"primary": PRIMARY, "fallbacks": [BACKUP]}})
        ended = await ev.wait_for("run.ended", timeout=60)
    await asyncio.sleep(0.2)  # counters are bumped right after the events are published
    text, after = scrape(system)

    fallbacks = ev.of("model.fallback")
    loops = ev.of("loop.detected")
    assert fallbacks and loops, "the scenario produced both a fallback and a loop detection"
    assert ended["status"] == "loop_terminated"

    # The reason label is the error code alone (a message would make unbounded series).
    by_pair = Counter((f["from_model"], f["to_model"], f["reason"].split(":", 1)[0]) for f in fallbacks)
    for (frm, to, reason), n in by_pair.items():
        assert delta(before, after, "loopwire_model_fallbacks_total", from_model=frm, to_model=to, reason=reason) == n
    by_loop = Counter((e["detection"], e["escalation"]) for e in loops)
    for (detection, escalation), n in by_loop.items():
        assert delta(before, after, "loopwire_loop_detections_total", detection=detection, escalation=escalation) == n
    assert delta(before, after, "loopwire_runs_ended_total", profile="agentic", status="loop_terminated") == 1
    assert delta(before, after, "loopwire_runs_started_total", profile="agentic") == 1
    assert delta(before, after, "loopwire_turns_total", profile="agentic") == ended["turns"]
    tokens_in = total(after, "loopwire_tokens_total", direction="input") - total(before, "loopwire_tokens_total",
                                                                                 direction="input")
    assert tokens_in == ended["usage"]["input_tokens"]
    # One generation per turn: the first published by the start's handler, the others
    # handed off as tasks of the run's work chain (one process: nothing to balance).
    assert delta(before, after, "loopwire_work_hops_total", target="memory.assemble", via="jetstream") == 1
    assert delta(before, after, "loopwire_work_hops_total", target="memory.assemble", via="chain") == \
        ended["turns"] - 1
    for _ in range(50):  # its last hop settles the chain just after run.ended goes out
        if (await asyncio.to_thread(scrape, system))[1].get(("loopwire_work_chains", ())) == 0:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the run's work chain did not end with the run")
    calls = len(ev.of("tool.result"))
    assert delta(before, after, "loopwire_tool_calls_total", tool="add", outcome="ok") == calls
    assert "metrics-1" not in text, "no session ids as labels"
    received = [(labels, v) for (n, labels), v in after.items()
                if n == "loopwire_faststream_received_messages_total"]
    assert received, "FastStream's message-level metrics are exported"
    assert any(dict(labels).get("handler") == "loopwire.in.*.start" or "loopwire.in.*.start" in str(labels)
               for labels, _ in received), received

    promtool = find_promtool()
    check = await asyncio.to_thread(subprocess.run, [promtool, "check", "metrics"], input=text.encode(),
                                    capture_output=True, timeout=60)
    assert check.returncode == 0, (check.stdout + check.stderr).decode()
