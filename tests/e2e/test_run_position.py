"""Where a run stands and how it stops, in both layouts (`loopwire up` and one `loopwire
serve` per service with two routers): `abort` keeps the input queued during the run, which
starts the next run; a turn_by_turn run whose proposal restates its answer reaches the
proposal checkpoint instead of ending as a loop."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, connected, serving_tools
from .events import SessionEvents, query
from .model_requests import content

pytestmark = pytest.mark.e2e


@pytest.fixture
async def lnc(layout_system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(layout_system) as client:
        yield client


@pytest.fixture
async def provider(lnc: NatsClient) -> AsyncIterator[ToolProvider]:
    async with serving_tools(lnc) as tools:
        yield tools


def sid() -> str:
    return f"e2e-pos-{uuid.uuid4().hex[:10]}"


@pytest.mark.timeout(90)
async def test_abort_keeps_the_queued_message_which_starts_the_next_run(
        lnc: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    provider.slow_delay_s = 4.0
    fake.script("*", [{"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]},
                      {"text": "Here is a joke."}])
    s = sid()
    async with SessionEvents(lnc, s) as ev:
        await ev.publish("start", {"input": "echo x", "tools": ["slow_echo"]})
        await asyncio.wait_for(provider.slow_started.wait(), 20)
        during = await query(lnc, "session.get", {"session_id": s})
        assert (during["status"], during["phase"], during["activity"]) == ("running", "execute", "tools")
        await ev.publish("message", {"content": "then tell me a joke"})
        await ev.publish("abort", {"reason": "changed my mind"})
        first = await ev.wait_for("run.ended", timeout=30)
        second = await ev.wait_for("run.ended", count=2, timeout=30)
    ev.check_bodies()
    # The message and the abort may reach different replicas, one applying both: the
    # other's replay of that outbox publishes none of its events again.
    ev.check_each_seq_once()
    assert first["status"] == "aborted" and first["reason"] == "changed my mind"
    assert second["status"] == "completed" and second["final_text"] == "Here is a joke."
    started = [e for e in ev.events if e["kind"] == "run.started"]
    assert len(started) == 2 and started[1]["run_id"] == second["run_id"] != first["run_id"]
    last = fake.message_requests[-1]["messages"]
    assert content(last[-1])[-1] == {"type": "text", "text": "then tell me a joke"}
    session = await query(lnc, "session.get", {"session_id": s})
    assert (session["status"], session["phase"], session["activity"]) == ("idle", None, None)


@pytest.mark.timeout(90)
async def test_turn_by_turn_proposal_that_restates_the_answer_is_reviewed_not_taken_for_a_loop(
        lnc: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    provider.slow_delay_s = 0.0
    answer = "Tool said: echo: x"
    # Word for word the same answer in execute (the approved work done) and in review (the
    # proposal the review request asks for): two identical texts in a row, which the loop
    # window would take for `repeated_text` if it saw both.
    fake.script("*", [{"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]},
                      {"text": answer}, {"text": answer}])
    s = sid()
    async with SessionEvents(lnc, s) as ev:
        await ev.publish("start", {"input": "echo x", "profile": "turn_by_turn", "tools": ["slow_echo"]})
        calls = await ev.wait_for("approval.requested", timeout=30)
        await ev.publish("decision", {"checkpoint_id": calls["checkpoint_id"], "decision": "approve"})
        proposal = await ev.wait_for("approval.requested", count=2, timeout=30)
        assert proposal["proposal"] == answer
        waiting = await query(lnc, "session.get", {"session_id": s})
        assert (waiting["status"], waiting["phase"], waiting["activity"]) == \
            ("awaiting_approval", "review", "awaiting_approval"), "a reconnecting UI knows it is the review"
        await ev.publish("decision", {"checkpoint_id": proposal["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended", timeout=30)
    ev.check_bodies()
    assert ev.of("loop.detected") == [] and ev.of("retracted") == []
    assert ended["status"] == "completed" and ended["final_text"] == answer
    assert [c[0] for c in provider.calls] == ["slow_echo"]
    assert len(fake.message_requests) == 3
    review_request = fake.message_requests[2]["messages"][-1]["content"][-1]["text"]
    assert review_request.startswith("Phase: review.")


@pytest.mark.timeout(60)
async def test_session_get_says_a_generation_is_in_flight(lnc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Slowly.", "delay_s": 3.0}])
    s = sid()
    async with SessionEvents(lnc, s) as ev:
        await ev.publish("start", {"input": "take your time"})
        await asyncio.to_thread(fake.wait_for_requests, 1, 20)
        during = await query(lnc, "session.get", {"session_id": s})
        await ev.wait_for("run.ended", timeout=30)
    assert (during["status"], during["phase"], during["activity"]) == ("running", "execute", "generating")
    listed = await query(lnc, "sessions.list", {"limit": 500})
    (row,) = [r for r in listed["sessions"] if r["session_id"] == s]
    assert (row["phase"], row["activity"]) == (None, None), "idle again, in the list too"


@pytest.mark.timeout(60)
async def test_a_start_narrows_its_loop_below_the_operators_cap(
        lnc: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    provider.slow_delay_s = 0.0
    fake.script("*", [{"text": "Round one.", "tool_use": [{"name": "slow_echo", "input": {"text": "1"}}]},
                      {"text": "Round two.", "tool_use": [{"name": "slow_echo", "input": {"text": "2"}}]},
                      {"text": "Done."}])
    s = sid()
    async with SessionEvents(lnc, s) as ev:
        await ev.publish("start", {"input": "echo twice", "tools": ["slow_echo"],
                                   "limits": {"max_inner_iterations": 1, "max_outer_iterations": 500}})
        ended = await ev.wait_for("run.ended", timeout=30)
    ev.check_bodies()
    assert (ended["status"], ended["reason"]) == ("max_turns", "max_inner_iterations"), ended
    assert [c[1]["text"] for c in provider.calls] == ["1"], "one round, then the run's own cap"
    assert len(fake.message_requests) == 1
    (warning,) = ev.of("warning")
    assert warning["code"] == "limit_above_ceiling" and warning["limits"] == ["max_outer_iterations"]
