"""`loopwire up` keeps a run's hops in-process (LOOPWIRE_LOCAL_HANDOVER): step results go
to the router and assembled requests to the llm service as calls, and the router's next
hops are tasks of a work chain held by the run's first work message (shared/runtime/chain.py).
With it off, the hops are JetStream work messages, as between `loopwire serve`
processes, where step results go to the router replica that sent the work as requests
(LOOPWIRE_DIRECT_RESULTS); with that off too, every hop is a work message. All give the
same run and transcript."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

EXPECTED = ["run.started", "phase.changed", "user.message", "message", "tool.call", "tool.result", "user.message",
            "message", "phase.changed", "run.ended"]


@contextlib.asynccontextmanager
async def system_nc(fake: FakeAnthropic, **env: str) -> AsyncIterator[NatsClient]:
    with started_system(fake, **env) as lw:
        async with connected(lw) as client:
            yield client


@pytest.fixture
async def no_handover_nc(fake_anthropic: FakeAnthropic) -> AsyncIterator[NatsClient]:
    async with system_nc(fake_anthropic, LOOPWIRE_LOCAL_HANDOVER="false", LOOPWIRE_DIRECT_RESULTS="false") as client:
        yield client


@pytest.fixture
async def direct_results_nc(fake_anthropic: FakeAnthropic) -> AsyncIterator[NatsClient]:
    async with system_nc(fake_anthropic, LOOPWIRE_LOCAL_HANDOVER="false") as client:
        yield client


async def run_one_tool_turn(nc: NatsClient, fake: FakeAnthropic) -> tuple[Counter[str], list[dict], dict]:
    """A run with one tool call; the work subjects published meanwhile, by count."""
    provider, svc = await serve_tools(nc)
    await wait_for_tools(nc, {"add"})
    fake.script("*", [
        {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
        {"text": "It is 3."},
    ])
    work: Counter[str] = Counter()

    async def seen(msg: Msg) -> None:
        work[msg.subject.removeprefix("loopwire.work.")] += 1

    async def direct(msg: Msg) -> None:  # a request to a router replica, which answers it
        work["direct." + msg.subject.removeprefix("loopwire.direct.").split(".")[0]] += 1

    sub = await nc.subscribe("loopwire.work.>", cb=seen)
    direct_sub = await nc.subscribe("loopwire.direct.>", cb=direct)
    sid = f"handover-{uuid.uuid4().hex[:8]}"
    try:
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("start", {"input": "1 + 2?", "tools": ["add"]})
            ended = await ev.wait_for("run.ended", timeout=30)
        transcript = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
    finally:
        await sub.unsubscribe()
        await direct_sub.unsubscribe()
        await svc.stop()
    assert [c[0] for c in provider.calls] == ["add"]
    return work, transcript, ended


async def test_in_process_hand_overs_leave_only_the_run_s_first_work_message_on_the_wire(
        nc: NatsClient, fake: FakeAnthropic) -> None:
    work, transcript, ended = await run_one_tool_turn(nc, fake)
    assert ended["status"] == "completed" and ended["final_text"] == "It is 3."
    assert [e["kind"] for e in transcript] == EXPECTED
    # The start's first generation is published (ingress holds no chain); the tool call
    # and the second generation are hops of the chain that message roots.
    assert work == Counter({"memory.assemble": 1})
    assert len(fake.message_requests) == 2


async def test_without_hand_overs_every_hop_is_a_work_message(
        no_handover_nc: NatsClient, fake: FakeAnthropic) -> None:
    work, transcript, ended = await run_one_tool_turn(no_handover_nc, fake)
    assert ended["status"] == "completed" and ended["final_text"] == "It is 3."
    assert [e["kind"] for e in transcript] == EXPECTED
    assert work == Counter({"memory.assemble": 2, "llm.generate": 2, "router.result": 3, "tools.execute": 1})
    assert len(fake.message_requests) == 2


async def test_without_local_hand_overs_the_results_go_to_the_router_that_sent_the_work(
        direct_results_nc: NatsClient, fake: FakeAnthropic) -> None:
    work, transcript, ended = await run_one_tool_turn(direct_results_nc, fake)
    assert ended["status"] == "completed" and ended["final_text"] == "It is 3."
    assert [e["kind"] for e in transcript] == EXPECTED
    assert work == Counter({"memory.assemble": 2, "llm.generate": 2, "direct.router": 3, "tools.execute": 1})
    assert len(fake.message_requests) == 2
