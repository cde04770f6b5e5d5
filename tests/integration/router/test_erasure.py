"""The router's session delete (services/router/shell/erasure.py) on one Redis and a real
NATS: a delete cut short anywhere after its tombstone leaves a session every reader takes
for gone, and the same request again completes it; then a delete again finds nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import nats
import pytest

from loopwire.router.shell import erasure
from loopwire.router.shell.erasure import ErasureQueries, note_user
from loopwire.settings import Settings
from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.protocol import SessionGetRequest
from loopwire.shared.contract.session_state import SessionState, is_deleted
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.streams import ensure_streams
from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.session_store import RedisSessionStore
from loopwire.transcripts.queries import session_get

pytestmark = pytest.mark.integration

SID = "gone-1"
REF = {"type": "text", "text": "big…", "loopwire_ref": {"sha256": "cd" * 32, "bytes": 99}}


class Crash(Exception):
    """The process serving the delete dies here."""


@pytest.fixture
async def ctx(redis_server: Any, nats_server: Any, prefix: str) -> AsyncIterator[Any]:
    settings = Settings(subject_prefix=prefix, delete_settle_s=0, session_ttl_s=0)
    redis = connect_redis(redis_server.url)
    await redis.flushdb()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await ensure_streams(js, settings)
    yield SimpleNamespace(
        settings=settings,
        subjects=Subjects(prefix),
        redis=redis,
        sessions=RedisSessionStore(redis),
        events=RedisEventLog(redis),
        bus=SimpleNamespace(nc=nc, js=js),
    )
    await nc.drain()
    await redis.aclose()


async def a_session(ctx: Any) -> None:
    """An idle session with history, events in Redis and in both streams, memory, a step
    record, a blob it refers to and a user index entry."""
    history = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": [REF]},
    ]
    state = SessionState(session_id=SID, history_len=2, runs=1)
    assert await ctx.sessions.commit(SID, 0, state.dump(), history_len_before=0, append=history)
    for n in range(3):
        event, _ = await ctx.events.append(
            SID, {"v": 1, "session_id": SID, "run_id": "r1", "kind": "message", "content": [REF]}, key=f"k{n}"
        )
        await ctx.bus.js.publish(ctx.subjects.event(SID, "message"), codec.dumps(event))
    await ctx.bus.js.publish(ctx.subjects.ingress(SID, "start"), b'{"input": "hello"}')
    await ctx.redis.rpush(keys.memory(SID, "obs"), b'{"text": "an observation"}')
    await ctx.redis.set(keys.step_record(keys.generation_step(SID, "r1:g1")), b'{"text": "hi"}')
    await ctx.redis.set(keys.blob("cd" * 32), b'"the large content"')
    await note_user(ctx, SID, "person-1")


async def left_of(ctx: Any) -> list[str]:
    names = [k.decode() async for k in ctx.redis.scan_iter(count=1000)]
    left = [n for n in names if SID in n or n == keys.blob("cd" * 32)]
    for name in names:
        if (await ctx.redis.type(name)) in (b"set", b"zset") and name.startswith("lw:"):
            members = (
                await ctx.redis.smembers(name)
                if await ctx.redis.type(name) == b"set"
                else await ctx.redis.zrange(name, 0, -1)
            )
            left += [f"{name} -> {SID}" for m in members if m.decode() == SID]
    for stream in ("LOOPWIRE_EVENTS", "LOOPWIRE_INGRESS"):
        info = await ctx.bus.js.stream_info(f"{stream}_{ctx.settings.subject_prefix.upper()}")
        left += [f"{stream}: {info.state.messages}"] if info.state.messages else []
    return left


async def aborted(sid: str, inp: Any) -> None:
    raise AssertionError("an idle session needs no abort")


@pytest.mark.parametrize("step", ["remove_index_entries", "remove_blobs", "purge_session_messages"])
async def test_a_delete_cut_short_stays_deleted_and_completes_when_asked_again(
    ctx: Any, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await a_session(ctx)
    queries = ErasureQueries(ctx, abort=aborted, forget=lambda sid: None)

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash(step)

    with monkeypatch.context() as patched:
        patched.setattr(erasure, step, crash)
        with pytest.raises(Crash):
            await queries.delete(SID, by="operator")
    raw, _ = await ctx.sessions.load(SID)
    assert is_deleted(raw), "the tombstone is the first thing written"
    assert (await session_get(SessionGetRequest(session_id=SID), ctx.sessions, ctx.events))[
        "status"
    ] == "unknown"
    assert await left_of(ctx), "the delete was cut short: something is left"

    reply = await queries.delete(SID, by="operator")
    assert reply["deleted"] is True and reply["resumed"] is True
    removed = {s["store"]: s["removed"] for s in reply["stores"]}
    assert removed["session_state"] == 1 and removed["history"] == 2
    assert await left_of(ctx) == []

    again = await queries.delete(SID, by="operator")
    assert again["deleted"] is False and again["resumed"] is False
    audit = [codec.loads(r) for r in await ctx.redis.lrange(keys.DELETE_AUDIT, 0, -1)]
    assert len(audit) == 2, "one record per delete that completed (the one cut short wrote none)"
    assert all(SID not in codec.dumps(r).decode() for r in audit)
    assert audit[0]["session"] == audit[1]["session"], "one keyed hash names the session"
    assert audit[1]["by"] == "operator" and audit[1]["stores"]["history"] == 2


async def test_a_deleted_sources_forks_stay_and_say_it_is_gone(ctx: Any) -> None:
    await a_session(ctx)
    fork = SessionState(
        session_id="fork-1", history_len=2, forked_from={"session_id": SID, "seq": 3, "cut_seq": 3}
    )  # type: ignore[arg-type]
    history = await ctx.sessions.history(SID)
    assert await ctx.sessions.commit("fork-1", 0, fork.dump(), history_len_before=0, append=history)
    await ctx.sessions.add_fork(SID, "fork-1")
    reply = await ErasureQueries(ctx, abort=aborted, forget=lambda sid: None).delete(SID, by="operator")
    assert reply["deleted"] is True
    raw, _ = await ctx.sessions.load("fork-1")
    assert raw["forked_from"]["session_id"] == "" and raw["forked_from"]["source_gone"] is True
    got = await session_get(SessionGetRequest(session_id="fork-1"), ctx.sessions, ctx.events)
    assert got["forked_from"] == {"session_id": None, "seq": 3, "cut_seq": 3, "source_gone": True}
    assert await ctx.sessions.history("fork-1") == history
    assert await ctx.redis.get(keys.blob("cd" * 32)) is not None, "the fork refers to it: kept"
