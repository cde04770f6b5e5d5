"""One conformance suite, every backend: the in-memory stores and the Redis stores must
behave the same (the langgraph checkpoint-conformance idea)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loopwire.shared.stores.event_log import InMemoryEventLog, RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.session_store import InMemorySessionStore, RedisSessionStore, sessions_index_key
from loopwire.shared.stores.step_store import InMemoryStepStore, RedisStepStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any, Any]]:
    if request.param == "memory":
        yield InMemorySessionStore(), InMemoryStepStore(), InMemoryEventLog()
        return
    server = request.getfixturevalue("redis_server")
    redis = connect_redis(server.url)
    await redis.flushdb()
    yield RedisSessionStore(redis), RedisStepStore(redis, ttl_s=60), RedisEventLog(redis)
    await redis.aclose()


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


async def test_new_session_loads_as_none_version_zero(stores: tuple[Any, Any, Any]) -> None:
    sessions, _, _ = stores
    assert await sessions.load("nobody") == (None, 0)
    assert await sessions.history("nobody") == []


async def test_commit_bumps_version_and_appends_history(stores: tuple[Any, Any, Any]) -> None:
    sessions, _, _ = stores
    assert await sessions.commit("s", 0, {"n": 1}, 0, [msg("a")])
    assert await sessions.load("s") == ({"n": 1}, 1)
    assert await sessions.commit("s", 1, {"n": 2}, 1, [msg("b", "assistant"), msg("c")])
    assert await sessions.load("s") == ({"n": 2}, 2)
    assert [m["content"][0]["text"] for m in await sessions.history("s")] == ["a", "b", "c"]
    assert [m["content"][0]["text"] for m in await sessions.history("s", 1, 1)] == ["b"]


async def test_commit_with_stale_version_changes_nothing(stores: tuple[Any, Any, Any]) -> None:
    sessions, _, _ = stores
    assert await sessions.commit("s", 0, {"n": 1}, 0, [msg("a")])
    assert not await sessions.commit("s", 0, {"n": 99}, 0, [msg("zzz")])
    assert await sessions.load("s") == ({"n": 1}, 1)
    assert len(await sessions.history("s")) == 1


async def test_concurrent_commits_on_one_version_exactly_one_wins(stores: tuple[Any, Any, Any]) -> None:
    sessions, _, _ = stores
    await sessions.commit("s", 0, {"n": 0}, 0, [])
    results = await asyncio.gather(*(sessions.commit("s", 1, {"n": k}, 0, [msg(str(k))]) for k in range(10)))
    assert sum(results) == 1
    state, version = await sessions.load("s")
    assert version == 2
    assert [m["content"][0]["text"] for m in await sessions.history("s")] == [str(state["n"])]


async def test_commit_truncates_history_beyond_the_counted_length(stores: tuple[Any, Any, Any]) -> None:
    """The state counts the history; a commit never lets orphan messages survive."""
    sessions, _, _ = stores
    await sessions.commit("s", 0, {}, 0, [msg("a"), msg("b", "assistant")])
    await sessions.commit("s", 1, {}, 1, [msg("c", "assistant")])
    assert [m["content"][0]["text"] for m in await sessions.history("s")] == ["a", "c"]


async def test_delete_removes_state_and_history(stores: tuple[Any, Any, Any]) -> None:
    sessions, _, _ = stores
    await sessions.commit("s", 0, {"x": 1}, 0, [msg("a")])
    await sessions.delete("s")
    assert await sessions.load("s") == (None, 0)
    assert await sessions.history("s") == []


async def test_step_records(stores: tuple[Any, Any, Any]) -> None:
    _, steps, _ = stores
    assert await steps.get("k1") is None
    await steps.put("k1", {"ok": True, "n": [1, 2]})
    assert await steps.get("k1") == {"ok": True, "n": [1, 2]}
    assert await steps.get_many(["k1", "k2"]) == [{"ok": True, "n": [1, 2]}, None]


async def test_put_if_absent_keeps_the_first_record(stores: tuple[Any, Any, Any]) -> None:
    _, steps, _ = stores
    assert await steps.put_if_absent("k", {"first": 1}) == {"first": 1}
    assert await steps.put_if_absent("k", {"second": 2}) == {"first": 1}
    assert await steps.get("k") == {"first": 1}


async def test_event_seq_strictly_increases_and_keys_dedup(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    e1, new1 = await log.append("s", {"v": 1, "session_id": "s", "run_id": "r", "kind": "a", "ts": "t1"}, "k1")
    e2, new2 = await log.append("s", {"v": 1, "session_id": "s", "run_id": "r", "kind": "b", "ts": "t2"}, "k2")
    again, new3 = await log.append("s", {"v": 1, "session_id": "s", "run_id": "r", "kind": "a", "ts": "t9"}, "k1")
    assert (e1["seq"], e2["seq"]) == (1, 2) and new1 and new2
    assert not new3 and again == e1, "a re-emission returns the original event"
    assert list(e1) == ["v", "session_id", "run_id", "seq", "kind", "ts"]
    assert [e["kind"] for e in await log.read("s")] == ["a", "b"]
    assert await log.last_seq("s") == 2


async def test_ephemeral_events_take_a_seq_but_are_not_stored(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    await log.append("s", {"kind": "a", "run_id": None}, "k1")
    delta, _ = await log.append("s", {"kind": "text.delta", "run_id": None}, None, store=False)
    await log.append("s", {"kind": "b", "run_id": None}, "k2")
    assert delta["seq"] == 2
    assert [(e["seq"], e["kind"]) for e in await log.read("s")] == [(1, "a"), (3, "b")]


async def test_event_pagination(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    for n in range(25):
        await log.append("s", {"kind": "k", "run_id": None, "n": n}, f"key{n}")
    page1 = await log.read("s", after_seq=0, limit=10)
    page2 = await log.read("s", after_seq=page1[-1]["seq"], limit=10)
    page3 = await log.read("s", after_seq=page2[-1]["seq"], limit=10)
    assert [e["n"] for e in page1 + page2 + page3] == list(range(25))
    assert await log.read("s", after_seq=25) == []


async def test_concurrent_appends_keep_seqs_unique(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    got = await asyncio.gather(*(log.append("s", {"kind": "k", "run_id": None}, f"c{n}") for n in range(50)))
    seqs = sorted(e["seq"] for e, _ in got)
    assert seqs == list(range(1, 51))
    assert [e["seq"] for e in await log.read("s", limit=100)] == seqs


async def test_seq_is_never_reused_after_delete(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    await log.append("s", {"kind": "k", "run_id": None}, "x")
    await log.delete("s")
    e, _ = await log.append("s", {"kind": "k", "run_id": None}, "y")
    assert e["seq"] == 2


async def test_append_many_is_append_of_each_in_order(stores: tuple[Any, Any, Any]) -> None:
    _, _, log = stores
    first, _ = await log.append("s", {"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "a", "ts": "t1"},
                                "k1")
    got = await log.append_many("s", [
        ({"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "b", "ts": "t2"}, "k2", True),
        ({"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "a", "ts": "t9"}, "k1", True),  # seen
        ({"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "text.delta", "ts": "t3"}, None, False),
        ({"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "c", "ts": "t4"}, None, True),
        ({"v": 1, "session_id": "s", "run_id": "r", "seq": 0, "kind": "d", "ts": "t5"}, "k2", True),  # in batch
    ])
    assert [(e["seq"], e["kind"], new) for e, new in got] == [
        (2, "b", True), (1, "a", False), (3, "text.delta", True), (4, "c", True), (2, "b", False)]
    assert got[1][0] == first, "a re-emission returns the original event"
    assert list(got[0][0]) == ["v", "session_id", "run_id", "seq", "kind", "ts"]
    assert [(e["seq"], e["kind"]) for e in await log.read("s")] == [(1, "a"), (2, "b"), (4, "c")]
    assert await log.last_seq("s") == 4
    assert await log.append_many("s", []) == []
    again = await log.append_many("s", [({"kind": "b", "run_id": "r"}, "k2", True)])
    assert again == [(got[0][0], False)], "a redelivered transition gets its events back"


async def test_restore_puts_back_a_lost_log_and_the_counter_goes_on(stores: tuple[Any, Any, Any]) -> None:
    _, _, events = stores
    archived = [{"v": 1, "session_id": "s", "run_id": "r", "seq": n, "kind": k}
                for n, k in ((1, "run.started"), (2, "message"), (4, "run.ended"))]
    assert await events.restore("s", archived)
    assert await events.read("s") == archived
    assert await events.last_seq("s") == 4
    appended, new = await events.append("s", {"v": 1, "session_id": "s", "run_id": "r", "kind": "run.started"},
                                        "k1")
    assert new and appended["seq"] == 5, "no seq is reused after a restore"
    assert not await events.restore("s", archived), "a log that is there is never overwritten"
    assert [e["seq"] for e in await events.read("s")] == [1, 2, 4, 5]


async def test_sessions_index_most_recent_first_with_a_cursor(stores: tuple[Any, Any, Any]) -> None:
    """Every commit marks its session updated; pages follow each other by (ms, sid) with
    no entry twice or missed, ties within one millisecond included; tenants apart."""
    sessions, _, _ = stores
    for sid in ("a", "b", "c", "acme.x", "acme.y"):
        assert await sessions.commit(sid, 0, {"status": "idle"}, 0, [])
        await asyncio.sleep(0.003)
    assert await sessions.commit("a", 1, {"status": "running"}, 0, [])  # a moves to the top
    index = sessions_index_key("a")
    listed = await sessions.recently_updated(index, None, 10)
    assert [sid for sid, _ in listed] == ["a", "c", "b"]
    assert listed[0][1] >= listed[1][1] > listed[2][1] > 0
    first = await sessions.recently_updated(index, None, 2)
    rest = await sessions.recently_updated(index, (first[-1][1], first[-1][0]), 2)
    assert [sid for sid, _ in first + rest] == ["a", "c", "b"]
    tenant = await sessions.recently_updated(sessions_index_key("acme.x"), None, 10)
    assert [sid for sid, _ in tenant] == ["acme.y", "acme.x"]
    assert await sessions.load_many(["a", "nobody", "acme.x"]) == [{"status": "running"}, None, {"status": "idle"}]
    # entries of one millisecond are ordered by sid, and a cursor inside them skips none
    ms = listed[0][1]
    assert await sessions.recently_updated(index, (ms, "a"), 10) == listed[1:]
    await sessions.delete("c")
    assert [sid for sid, _ in await sessions.recently_updated(index, None, 10)] == ["a", "b"]


async def test_a_step_claim_fences_its_side_effect(stores: tuple[Any, Any, Any]) -> None:
    from loopwire.shared.stores.step_store import StepHeld

    _, steps, _ = stores
    first = await steps.claim("c:step1", ["r:a", "r:b"], ttl_s=0.5)
    assert first.token and first.records == [None, None]
    with pytest.raises(StepHeld):  # a second worker performs nothing while the first lives
        await steps.claim("c:step1", ["r:a", "r:b"], ttl_s=0.5)
    assert await steps.renew("c:step1", first.token, 0.5)
    await asyncio.sleep(0.7)  # the first worker stopped renewing (paused): its claim expires
    second = await steps.claim("c:step1", ["r:a", "r:b"], ttl_s=5)
    assert second.token and second.token != first.token
    assert int(second.token.split("|")[1]) > int(first.token.split("|")[1]), "a higher fencing token"
    assert not await steps.renew("c:step1", first.token, 5)
    # The paused worker resumes: its write is refused, the owner's stands.
    with pytest.raises(StepHeld):
        await steps.record_claimed("c:step1", first.token, "r:a", {"by": "first"})
    assert await steps.record_claimed("c:step1", second.token, "r:a", {"by": "second"}) == {"by": "second"}
    assert await steps.record_claimed("c:step1", second.token, "r:b", {"by": "second"}, release=True) == {
        "by": "second"}
    # Everything recorded: a late delivery gets the records and claims nothing.
    late = await steps.claim("c:step1", ["r:a", "r:b"], ttl_s=5)
    assert late.token is None and late.records == [{"by": "second"}, {"by": "second"}]
    # A record that stands is returned to a writer whose claim expired unchallenged.
    assert await steps.record_claimed("c:step1", first.token, "r:a", {"by": "first"}) == {"by": "second"}
