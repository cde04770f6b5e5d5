"""A session rebuilt from its transcript and stored without overwriting anything, on every backend; and `session.get` answering from the transcript when the state is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from loopwire.router.shell.rebuild import rebuild_session
from loopwire.shared.contract.protocol import SessionGetRequest
from loopwire.shared.stores.event_log import InMemoryEventLog, RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.session_store import InMemorySessionStore, RedisSessionStore
from loopwire.transcripts.queries import session_get
from tests.unit.router.test_journal_resume import Journal, use
from tests.unit.router.test_rebuild import SID, t, transcript


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield InMemorySessionStore(), InMemoryEventLog()
        return
    redis = connect_redis(request.getfixturevalue("redis_server").url)
    await redis.flushdb()
    yield RedisSessionStore(redis), RedisEventLog(redis)
    await redis.aclose()


@pytest.mark.integration
async def test_rebuild_stores_the_session_once_and_never_overwrites(stores: Any) -> None:
    sessions, events = stores
    assert await rebuild_session(SID, events, sessions) is None, "no transcript"
    for event in transcript():
        await events.append(SID, event, key=None, store=event["kind"] != "text.delta")
    state = await rebuild_session(SID, events, sessions)
    assert state is not None and state["history_len"] == 7
    raw, version = await sessions.load(SID)
    assert raw == state and version == 1
    history = await sessions.history(SID)
    assert history[0]["content"][0]["text"] == "My code is ALPHA-7. Add 1 and 2." and len(history) == 7
    assert await rebuild_session(SID, events, sessions) is None, "an existing session is kept"
    assert (await sessions.load(SID))[1] == 1


@pytest.mark.integration
async def test_session_get_answers_from_the_transcript_when_the_state_is_gone(stores: Any) -> None:
    sessions, events = stores
    for event in transcript():
        await events.append(SID, event, key=None)
    reply = await session_get(SessionGetRequest(session_id=SID), sessions, events)
    assert reply["status"] == "idle" and reply["source"] == "transcript" and reply["runs"] == 2
    assert reply["turns"] == 3 and len(reply["messages"]) == 7 and reply["profile"] == "agentic"
    unknown = await session_get(SessionGetRequest(session_id="other"), sessions, events)
    assert unknown["status"] == "unknown"


@pytest.mark.integration
async def test_a_run_waiting_on_a_checkpoint_is_rebuilt_and_reported_waiting(stores: Any) -> None:
    sessions, events = stores
    drv = Journal()
    drv.ingress("start", {"input": "Clean up.", "tools": ["rm"], "tool_permissions": {"rm": "approve"}})
    drv.generation(t("Removing."), use("tu1", "rm", path="/tmp/x"))
    for event in drv.events:
        await events.append(SID, event, key=None)
    cid = drv.state.run.approvals.checkpoint.id
    reply = await session_get(SessionGetRequest(session_id=SID), sessions, events)
    assert (reply["status"], reply["checkpoint_id"], reply["run_id"]) == ("awaiting_approval", cid, "run1")
    state = await rebuild_session(SID, events, sessions)
    assert state is not None and state["status"] == "awaiting_approval"
    assert state["run"]["approvals"]["checkpoint"]["id"] == cid
    history = await sessions.history(SID)
    assert history[-1]["content"][-1]["id"] == "tu1", "the batch waits for its results"
    reply = await session_get(SessionGetRequest(session_id=SID), sessions, events)
    assert (reply["status"], reply["checkpoint_id"]) == ("awaiting_approval", cid), "now from the state"
