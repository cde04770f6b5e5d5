"""Concurrency sized for waiting: in the deployed layout (one `loopwire serve` per service,
two routers, one llm replica), 150 sessions start at once against a model that takes
3 s to answer. The one llm replica holds all their generations in flight together (its
handler cap is LOOPWIRE_LLM_MAX_HANDLERS, thousands by default, no longer a fixed 64),
so the fake Messages API sees far more than 64 requests at once, and every run completes."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, started_system
from .events import SessionEvents

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SESSIONS = 150
MODEL_S = 3.0


async def test_one_llm_replica_holds_more_than_64_generations_in_flight(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "Answered after a while.", "delay_s": MODEL_S}
    with started_system(fake, layout="split") as system:
        async with connected(system) as nc:
            followers = [SessionEvents(nc, f"conc-{uuid.uuid4().hex[:8]}-{n}") for n in range(SESSIONS)]
            for ev in followers:
                await ev.__aenter__()
            try:
                await asyncio.gather(*(ev.publish("start", {"input": "take your time"}) for ev in followers))
                ended = await asyncio.gather(*(ev.wait_for("run.ended", timeout=120) for ev in followers))
            finally:
                for ev in followers:
                    await ev.__aexit__()
    assert [e["status"] for e in ended] == ["completed"] * SESSIONS
    assert len(system.of_service("llm")) == 1
    assert fake.max_in_flight > 64, f"at most {fake.max_in_flight} generations were in flight at once"
    assert fake.max_in_flight >= SESSIONS * 0.8
