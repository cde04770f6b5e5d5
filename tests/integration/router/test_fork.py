"""The router's fork (services/router/shell/fork.py) on every store backend, one Redis and a
3-master Redis Cluster (where the source and the fork sit in different slots): what a
fork writes and shares, the retry of one, and a fork rebuilt from its transcript alone.
The events' publication is recorded here; tests/e2e/test_fork_replay.py runs the whole."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from redis.crc import key_slot

from loopwire.memory.assembly import normalise_messages
from loopwire.router.shell.fork import ForkQuery, ForkRefused
from loopwire.router.shell.rebuild import rebuild_session
from loopwire.settings import Settings
from loopwire.shared.contract import keys
from loopwire.shared.contract.protocol import SessionForkRequest
from loopwire.shared.stores.event_log import InMemoryEventLog, RedisEventLog
from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis
from loopwire.shared.stores.session_store import InMemorySessionStore, RedisSessionStore
from loopwire.testing.redis_cluster import RedisClusterHandle, start_redis_cluster
from tests.router_driver import Recorder
from tests.unit.shared.stores.test_lineage import two_runs

pytestmark = pytest.mark.integration

REF = {"type": "text", "text": "big…", "loopwire_ref": {"sha256": "ab" * 32, "bytes": 99}}


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterHandle]:
    with start_redis_cluster(masters=3, replicas=0) as cluster:
        yield cluster


class Published:
    """The bus of the test: the events the fork published."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def publish_stored(self, sid: str, stored: list[tuple[dict[str, Any], bool]]) -> None:
        self.events.extend(event for event, _ in stored)


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
async def ctx(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    settings = Settings(session_ttl_s=0, step_result_ttl_s=600)
    if request.param == "memory":
        yield SimpleNamespace(settings=settings, sessions=InMemorySessionStore(), events=InMemoryEventLog(),
                              redis=None, bus=Published())
        return
    if request.param == "redis":
        redis = connect_redis(request.getfixturevalue("redis_server").url)
    else:
        redis = connect_redis(RedisTopology(request.getfixturevalue("redis_cluster").url, cluster=True))
    await redis.flushdb()
    yield SimpleNamespace(settings=settings, sessions=RedisSessionStore(redis), events=RedisEventLog(redis),
                          redis=redis, bus=Published())
    await redis.aclose()


async def recorded(ctx: Any, d: Recorder | None = None) -> Recorder:
    """The source session as the router leaves it: its state, history and transcript."""
    d = d or two_runs()
    assert await ctx.sessions.commit("src", 0, d.state.dump(), history_len_before=0, append=d.history)
    for event in d.transcript:
        await ctx.events.append("src", event, key=None)
    return d


def fork(ctx: Any, new: str, at: int | None = None, tools: str = "live") -> Any:
    return ForkQuery(ctx).fork(SessionForkRequest(session_id="src", new_session_id=new, at_seq=at, tools=tools))


async def test_a_fork_writes_its_own_session_and_shares_the_source_untouched(ctx: Any) -> None:
    d = await recorded(ctx)
    first_end = next(e["seq"] for e in d.transcript if e["kind"] == "run.ended")
    before = (await ctx.sessions.load("src"), await ctx.sessions.history("src"), await ctx.events.last_seq("src"))
    reply = await fork(ctx, "f1", first_end)
    assert reply["forked_from"] == {"session_id": "src", "seq": first_end} and reply["cut_seq"] == first_end
    raw, version = await ctx.sessions.load("f1")
    assert version == 1 and raw["status"] == "idle" and raw["forked_from"]["session_id"] == "src"
    assert raw["last_config"]["system"] == "be brief"
    history = await ctx.sessions.history("f1")
    assert normalise_messages(history) == d.histories[[len(h) for h in d.histories].index(6)]
    (forked,) = await ctx.events.read("f1")
    assert (forked["seq"], forked["kind"], forked["from_seq"], forked["messages"]) == (1, "session.forked",
                                                                                    first_end, len(history))
    assert ctx.bus.events == [forked]
    assert await ctx.sessions.forks("src") == ["f1"]
    after = (await ctx.sessions.load("src"), await ctx.sessions.history("src"), await ctx.events.last_seq("src"))
    assert after == before, "the source is unchanged"


async def test_errors_and_the_same_fork_asked_again(ctx: Any) -> None:
    d = await recorded(ctx)
    for new, at, code in (("f1", 0, "invalid_seq"), ("f1", len(d.transcript) + 1, "invalid_seq"),
                          ("src", None, "session_exists")):
        with pytest.raises(ForkRefused) as refused:
            await fork(ctx, new, at)
        assert refused.value.code == code
    with pytest.raises(ForkRefused) as unknown:
        await ForkQuery(ctx).fork(SessionForkRequest(session_id="nobody", new_session_id="f"))
    assert unknown.value.code == "unknown_session"
    made = await fork(ctx, "f1", 5)
    assert await fork(ctx, "f1", 5) == made, "answered again, and published again"
    assert [e["seq"] for e in ctx.bus.events] == [1, 1]
    with pytest.raises(ForkRefused, match="exists"):
        await fork(ctx, "f1", 6), "another fork under a taken id"
    await ctx.events.append("f1", {"v": 1, "session_id": "f1", "run_id": None, "kind": "error", "ts": "x"}, key=None)
    with pytest.raises(ForkRefused, match="exists"):
        await fork(ctx, "f1", 5), "something happened on it since"


async def test_a_fork_rebuilt_from_its_transcript_has_its_history_back(ctx: Any) -> None:
    d = await recorded(ctx)
    await fork(ctx, "f1", len(d.transcript), tools="recorded")
    history = await ctx.sessions.history("f1")
    await ctx.sessions.delete("f1")  # its state lost; its transcript and its source's remain
    state = await rebuild_session("f1", ctx.events, ctx.sessions)
    assert state is not None and state["forked_from"]["session_id"] == "src" and state["tool_recording"] == "src"
    assert normalise_messages(await ctx.sessions.history("f1")) == normalise_messages(history)
    assert state["last_config"]["system"] == "be brief"


async def test_the_compaction_summary_and_blobs_are_shared_where_they_apply(ctx: Any) -> None:
    if ctx.redis is None:
        pytest.skip("the memory records and blobs live in Redis")
    d = Recorder()
    d.start(input="Read the log.")
    d.answer("Reading.", {"type": "tool_use", "id": "t1", "name": "read", "input": {}})
    d.tools("x")
    result = next(e for e in d.transcript if e["kind"] == "tool.result")
    result["content"] = [REF]  # a large result, by reference (blobs.py), as the tools service stores it
    d.answer("It says x.")
    d.message("And then?")
    d.answer("Nothing else.")
    await recorded(ctx, d)
    record = {"covers": 3, "summary": "read the log", "fingerprint": "f", "step_id": "s"}
    await ctx.redis.set(keys.memory("src", "compaction"), orjson.dumps(record))
    await ctx.redis.set(keys.blob("ab" * 32), b"the whole log")
    whole = await fork(ctx, "f1")
    assert whole["messages"] >= 4
    assert orjson.loads(await ctx.redis.get(keys.memory("f1", "compaction"))) == record, "it covers what f1 has"
    assert 0 < await ctx.redis.ttl(keys.blob("ab" * 32)) <= 600, "the shared blob lives on with the fork"
    assert await ctx.redis.get(keys.blob("ab" * 32)) == b"the whole log" and not await ctx.redis.exists(
        keys.blob("f1")), "shared, not copied"
    first_answer = next(e["seq"] for e in d.transcript if e["kind"] == "tool.result")
    short = await fork(ctx, "f2", first_answer)
    assert short["messages"] == 3 and await ctx.redis.get(keys.memory("f2", "compaction")) is None, \
        "a summary of more than the fork has is not the fork's"
    assert key_slot(keys.session_state("src").encode()) != key_slot(keys.session_state("f1").encode()), \
        "on a cluster: the source's and the fork's keys in different slots, as here"
