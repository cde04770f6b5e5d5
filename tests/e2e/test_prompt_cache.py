"""Prompt caching end to end (protocol.md, "Prompt caching"), in the deployed layout with
two memory and two llm replicas (and two routers): a run of five tool-turns against the
fake Messages API's cache (loopwire/testing/fake_prompt_cache.py). Every request carries
one to four breakpoints; whichever replicas assembled and sent them, from the third request
on at least 80% of each request's input is read from the cache; `run.ended.usage` sums the
cache tokens and `cost_usd` is the price table applied to them. `prompt_cache: off` sends
no breakpoint. A fork, and a replay on the same model, read their source's prefix; a run that may wait on an approval marks
its breakpoints with the 1-hour TTL."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.client import LoopwireClient
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.runtime.pricing import DEFAULT_PRICES, cost_usd, price_table
from loopwire.testing import LoopwireContainer, replay_session
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, connected, serving_tools, started_system
from .events import SessionEvents

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LAYOUT = ("serve router", "serve router", "serve llm", "serve llm", "serve tools", "serve memory", "serve memory",
          "serve transcripts")
MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a careful assistant who checks every number twice. " * 120  # about 1,800 tokens
TURNS = 5


@pytest.fixture(scope="module")
def cache_system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout=LAYOUT) as lw:
        yield lw


@pytest.fixture
async def cnc(cache_system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(cache_system) as client:
        yield client


@pytest.fixture
async def provider(cnc: NatsClient) -> AsyncIterator[ToolProvider]:
    async with serving_tools(cnc) as tools:
        yield tools


def cache_marks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The blocks of a request that carry a breakpoint, in the API's order."""
    blocks = [*(body.get("tools") or []), *(body["system"] if isinstance(body.get("system"), list) else [])]
    blocks += [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [b for b in blocks if isinstance(b, dict) and "cache_control" in b]


def breakpoints(body: dict[str, Any]) -> int:
    return len(cache_marks(body))


def script(fake: FakeAnthropic) -> None:
    turns = [{"text": f"Step {n}.", "tool_use": [{"name": "add", "input": {"a": n, "b": n}}]} for n in range(TURNS)]
    fake.script("*", [*turns, {"text": "All added."}])


async def run(nc: NatsClient, **model: Any) -> dict[str, Any]:
    async with SessionEvents(nc, f"cache-{uuid.uuid4().hex[:8]}") as ev:
        await ev.publish("start", {"input": "add some numbers", "system": SYSTEM, "tools": ["add", "slow_echo"],
                                   "model": {"primary": MODEL, **model}})
        ended = await ev.wait_for("run.ended", timeout=60)
    ev.check_bodies()
    ev.check_each_seq_once()
    return ended


async def test_every_request_reads_the_previous_prefix_from_the_cache(
        cnc: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    script(fake)
    ended = await run(cnc)
    assert ended["status"] == "completed", ended
    requests = fake.message_requests
    assert len(requests) == TURNS + 1
    assert all(1 <= breakpoints(r) <= 4 for r in requests), [breakpoints(r) for r in requests]
    usages = fake.usages
    assert len(usages) == len(requests)
    for n, usage in enumerate(usages[2:], start=3):
        total = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        assert usage["cache_read_input_tokens"] >= 0.8 * total, f"request {n}: {usage}"
    summed = Usage(input_tokens=sum(u["input_tokens"] for u in usages),
                   output_tokens=ended["usage"]["output_tokens"],
                   cache_read_input_tokens=sum(u["cache_read_input_tokens"] for u in usages),
                   cache_creation_input_tokens=sum(u["cache_creation_input_tokens"] for u in usages))
    reported = ended["usage"]
    assert (reported["cache_read_input_tokens"], reported["cache_creation_input_tokens"]) == \
        (summed.cache_read_input_tokens, summed.cache_creation_input_tokens)
    assert ended["cost_usd"] == pytest.approx(cost_usd(MODEL, summed, price_table({}) or DEFAULT_PRICES), rel=1e-6)


async def test_prompt_cache_off_sends_no_breakpoint(cnc: NatsClient, fake: FakeAnthropic,
                                                    provider: ToolProvider) -> None:
    script(fake)
    ended = await run(cnc, prompt_cache="off")
    assert ended["status"] == "completed"
    assert [breakpoints(r) for r in fake.message_requests] == [0] * (TURNS + 1)
    assert ended["usage"]["cache_read_input_tokens"] == 0


async def test_a_fork_reads_its_source_prefix_from_the_cache(cnc: NatsClient, fake: FakeAnthropic,
                                                             provider: ToolProvider) -> None:
    """A fork (at the run's end, and inside it at an earlier turn) sends a prefix its source
    already sent: its first request reads it from the cache instead of writing it again."""
    script(fake)
    async with SessionEvents(cnc, f"cache-src-{uuid.uuid4().hex[:8]}") as src:
        await src.publish("start", {"input": "add some numbers", "system": SYSTEM, "tools": ["add", "slow_echo"],
                                    "model": {"primary": MODEL}})
        assert (await src.wait_for("run.ended", timeout=60))["status"] == "completed"
    calls = [e for e in src.events if e["kind"] == "tool.call"]
    for at_seq in (src.events[-1]["seq"], calls[2]["seq"]):
        fork = f"cache-fork-{uuid.uuid4().hex[:8]}"
        reply = await cnc.request("loopwire.api.session.fork", json.dumps(
            {"session_id": src.sid, "new_session_id": fork, "at_seq": at_seq}).encode(), timeout=10)
        assert "error" not in json.loads(reply.data), reply.data
        fake.script("*", [{"text": "Forked on."}])
        answered = len(fake.usages)
        async with SessionEvents(cnc, fork) as ev:
            await ev.publish("message", {"v": 1, "content": "And now?"})
            assert (await ev.wait_for("run.ended", timeout=60))["status"] == "completed"
        (usage,) = fake.usages[answered:]
        total = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        assert usage["cache_read_input_tokens"] >= 0.8 * total, f"the fork at seq {at_seq} wrote anew: {usage}"


async def test_a_run_that_waits_on_an_approval_keeps_its_prefix_for_an_hour(
        cnc: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    """A tool under `approve`: the run's breakpoints carry the 1-hour TTL, so the request after
    a decision taken past the 5-minute TTL (the fake's TTLs scaled down: 5m -> 1 s) still
    reads its prefix; a run that never waits keeps the 5-minute TTL."""
    fake.prompt_cache.ttl_s = {"5m": 1.0, "1h": 60.0}
    fake.script("*", [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 3}}]},
                      {"text": "It is 5."}])
    async with SessionEvents(cnc, f"cache-wait-{uuid.uuid4().hex[:8]}") as ev:
        await ev.publish("start", {"input": "add 2 and 3", "system": SYSTEM, "tools": ["add"],
                                   "tool_permissions": {"add": "approve"}, "model": {"primary": MODEL}})
        asked = await ev.wait_for("approval.requested", timeout=30)
        await asyncio.sleep(1.5)  # past the 5-minute TTL, as the fake counts it now
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        assert (await ev.wait_for("run.ended", timeout=30))["status"] == "completed"
    first, after = fake.message_requests
    ttls = {str(b["cache_control"].get("ttl")) for b in cache_marks(first) + cache_marks(after)}
    assert ttls == {"1h"}, ttls
    usage = fake.usages[1]
    total = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    assert usage["cache_read_input_tokens"] >= 0.8 * total, f"the prefix expired during the wait: {usage}"
    fake.reset()
    fake.prompt_cache.ttl_s = {"5m": 1.0, "1h": 60.0}
    script(fake)
    assert (await run(cnc))["status"] == "completed"
    assert {str(b["cache_control"].get("ttl")) for r in fake.message_requests for b in cache_marks(r)} == {"None"}



async def test_a_replay_on_the_same_model_reads_the_shared_prefix(cache_system: LoopwireContainer, cnc: NatsClient,
                                                                  fake: FakeAnthropic, provider: ToolProvider) -> None:
    """A replay of a recorded session (recorded tools, the same model) starts with the
    source's tools and system prompt: its first request reads them from the cache."""
    script(fake)
    ended = await run(cnc)
    assert ended["status"] == "completed"
    src = ended["session_id"]
    script(fake)
    answered = len(fake.usages)
    async with await LoopwireClient.connect(cache_system.get_nats_url()) as lw:
        report = await replay_session(lw, src, tools="recorded")
    assert report.runs and (report.runs[0].replay or {}).get("status") == "completed"
    first = fake.usages[answered]
    total = first["input_tokens"] + first["cache_read_input_tokens"] + first["cache_creation_input_tokens"]
    assert first["cache_read_input_tokens"] >= 0.8 * total, f"the replay's first request wrote anew: {first}"
