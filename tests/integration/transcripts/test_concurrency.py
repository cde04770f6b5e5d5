"""The transcripts service answers queries concurrently: one query waiting on a store holds
up no other, and one the events stream does not answer in time gets `unavailable`.

Handled one after the other, a single `session.get` of a session with no state (which asks
the LOOPWIRE_EVENTS stream whether Redis lost it) kept every query behind it waiting for
that JetStream request; pollers of a few sessions at 5/s each then timed out together on a
loaded machine (tests/e2e/test_replicas.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient

import loopwire.transcripts.service as transcripts_service
from loopwire.launcher import Running, start_services
from loopwire.settings import Settings
from loopwire.testing.servers import ServerHandle

pytestmark = pytest.mark.integration

SESSIONS = 8


@pytest.fixture
async def transcripts(nats_server: ServerHandle, redis_server: ServerHandle,
                      prefix: str) -> AsyncIterator[tuple[Running, NatsClient]]:
    settings = Settings(nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix=prefix,
                        metrics_port=0, gc_thresholds="", gc_freeze=False)
    running = await start_services(["transcripts"], settings)
    for n in range(SESSIONS):
        state = {"schema": 1, "session_id": f"{prefix}-s{n}", "status": "idle", "run": None, "turns": 1}
        assert await running.ctx.sessions.commit(f"{prefix}-s{n}", 0, state, history_len_before=0, append=[{"role": "user", "content": "hi"}])
    nc = await nats.connect(nats_server.url)
    try:
        yield running, nc
    finally:
        await nc.drain()
        await running.stop()


async def session_get(nc: NatsClient, prefix: str, sid: str) -> dict[str, Any]:
    reply = await nc.request(f"{prefix}.api.session.get", json.dumps({"session_id": sid}).encode(), timeout=5)
    return dict(json.loads(reply.data))


async def test_a_query_waiting_on_the_events_stream_holds_up_no_other(
        transcripts: tuple[Running, NatsClient], prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    running, nc = transcripts
    release, asked = asyncio.Event(), asyncio.Event()

    async def slow_archive(js: Any, subjects: Any, sid: str) -> list[dict[str, Any]]:
        asked.set()
        await release.wait()  # a JetStream request a busy server answers late
        return []

    monkeypatch.setattr(transcripts_service, "read_archive", slow_archive)
    waiting = asyncio.create_task(session_get(nc, prefix, f"{prefix}-no-state"))
    await asyncio.wait_for(asked.wait(), 5)
    # Five rounds of polls of every session with state, while that one waits.
    for _ in range(5):
        replies = await asyncio.gather(*(session_get(nc, prefix, f"{prefix}-s{n}") for n in range(SESSIONS)))
        assert [r["status"] for r in replies] == ["idle"] * SESSIONS
        assert [r["messages"] for r in replies] == [[{"role": "user", "content": "hi"}]] * SESSIONS
    assert not waiting.done(), "the query of the session with no state is still waiting on the stream"
    release.set()
    assert (await waiting)["status"] == "unknown"


async def test_a_query_the_events_stream_does_not_answer_in_time_is_answered_unavailable(
        transcripts: tuple[Running, NatsClient], prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    running, nc = transcripts

    async def stuck_archive(js: Any, subjects: Any, sid: str) -> list[dict[str, Any]]:
        await asyncio.Event().wait()
        return []

    monkeypatch.setattr(transcripts_service, "read_archive", stuck_archive)
    reply = await session_get(nc, prefix, f"{prefix}-no-state")
    assert reply["error"]["code"] == "unavailable" and "events stream" in reply["error"]["message"]
    transcript = json.loads((await nc.request(f"{prefix}.api.transcript.get", json.dumps(
        {"session_id": f"{prefix}-no-state"}).encode(), timeout=5)).data)
    assert transcript["error"]["code"] == "unavailable"
    # The service goes on answering: a session with state, at once.
    assert (await session_get(nc, prefix, f"{prefix}-s0"))["status"] == "idle"
