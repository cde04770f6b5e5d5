"""The store conformance suite: what every backend of loopwire's stores does.

One set of checks of the store protocols (shared/stores: SessionStore, StepStore,
EventLogStore), for any backend: loopwire's in-memory and Redis backends pass it in its
own test suite (tests/integration/shared/stores/test_store_conformance.py), and a backend of your own is held to it
the same way. The base checks hold for every backend. A check of an optional capability
(shared/stores/capabilities.py) checks it where the backend declares it, and checks the
refusal (`Unsupported`) where it does not.

    from loopwire.testing.store_conformance import CHECKS, Backend, Check

    @pytest.fixture
    async def backend() -> AsyncIterator[Backend]:
        yield Backend("mine", sessions=..., steps=..., events=...)   # empty stores

    @pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
    async def test_store_conformance(backend: Backend, check: Check) -> None:
        await check(backend)

Each check expects empty stores of its own (a fresh backend per check). Step names are
those of one session (shared/contract/keys.py), as the services use them, so a backend that
shards by session (a Redis Cluster) passes the same checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import Message, Role, message_text
from loopwire.shared.contract.protocol import make_event
from loopwire.shared.stores.capabilities import Capability, Unsupported
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.session_store import SessionStore
from loopwire.shared.stores.step_store import StepHeld, StepStore


@dataclass
class Backend:
    """One backend's stores, empty."""

    name: str
    sessions: SessionStore
    steps: StepStore
    events: EventLogStore
    redis: Any = None
    """The Redis the stores use (redis.asyncio), for the PIPELINED_HISTORY check."""


Check = Callable[[Backend], Awaitable[None]]


def msg(text: str, role: Role = "user") -> Message:
    return {"role": role, "content": [{"type": "text", "text": text}]}


async def new_session_loads_as_none_version_zero(b: Backend) -> None:
    sessions = b.sessions
    assert await sessions.load("nobody") == (None, 0)
    assert await sessions.history("nobody") == []


async def commit_bumps_version_and_appends_history(b: Backend) -> None:
    sessions = b.sessions
    assert await sessions.commit("s", 0, {"n": 1}, history_len_before=0, append=[msg("a")])
    assert await sessions.load("s") == ({"n": 1}, 1)
    assert await sessions.commit("s", 1, {"n": 2}, history_len_before=1, append=[msg("b", "assistant"), msg("c")])
    assert await sessions.load("s") == ({"n": 2}, 2)
    assert [message_text(m) for m in await sessions.history("s")] == ["a", "b", "c"]
    assert [message_text(m) for m in await sessions.history("s", 1, 1)] == ["b"]


async def commit_with_stale_version_changes_nothing(b: Backend) -> None:
    sessions = b.sessions
    assert await sessions.commit("s", 0, {"n": 1}, history_len_before=0, append=[msg("a")])
    assert not await sessions.commit("s", 0, {"n": 99}, history_len_before=0, append=[msg("zzz")])
    assert await sessions.load("s") == ({"n": 1}, 1)
    assert len(await sessions.history("s")) == 1


async def concurrent_commits_on_one_version_exactly_one_wins(b: Backend) -> None:
    sessions = b.sessions
    await sessions.commit("s", 0, {"n": 0}, history_len_before=0, append=[])
    results = await asyncio.gather(*(sessions.commit("s", 1, {"n": k}, history_len_before=0, append=[msg(str(k))]) for k in range(10)))
    assert sum(results) == 1
    state, version = await sessions.load("s")
    assert version == 2 and state is not None
    assert [message_text(m) for m in await sessions.history("s")] == [str(state["n"])]


async def commit_truncates_history_beyond_the_counted_length(b: Backend) -> None:
    """The state counts the history; a commit never lets orphan messages survive."""
    sessions = b.sessions
    await sessions.commit("s", 0, {}, history_len_before=0, append=[msg("a"), msg("b", "assistant")])
    await sessions.commit("s", 1, {}, history_len_before=1, append=[msg("c", "assistant")])
    assert [message_text(m) for m in await sessions.history("s")] == ["a", "c"]


async def delete_removes_state_and_history(b: Backend) -> None:
    sessions = b.sessions
    await sessions.commit("s", 0, {"x": 1}, history_len_before=0, append=[msg("a")])
    await sessions.delete("s")
    assert await sessions.load("s") == (None, 0)
    assert await sessions.history("s") == []


GEN = keys.generation_step("s", "r:g1")
CALL_A, CALL_B = keys.tool_call_step("s", "toolu_a"), keys.tool_call_step("s", "toolu_b")
BATCH = keys.tool_batch_step("s", "r:t1")


async def step_records(b: Backend) -> None:
    steps = b.steps
    assert await steps.get(CALL_A) is None
    await steps.put(CALL_A, {"ok": True, "n": [1, 2]})
    assert await steps.get(CALL_A) == {"ok": True, "n": [1, 2]}
    assert await steps.get_many([CALL_A, CALL_B]) == [{"ok": True, "n": [1, 2]}, None]


async def put_if_absent_keeps_the_first_record(b: Backend) -> None:
    steps = b.steps
    assert await steps.put_if_absent(GEN, {"first": 1}) == {"first": 1}
    assert await steps.put_if_absent(GEN, {"second": 2}) == {"first": 1}
    assert await steps.get(GEN) == {"first": 1}


async def event_seq_strictly_increases_and_keys_dedup(b: Backend) -> None:
    log = b.events
    e1, new1 = await log.append("s", _event("a", "r", ts="t1"), "k1")
    e2, new2 = await log.append("s", _event("b", "r", ts="t2"), "k2")
    again, new3 = await log.append("s", _event("a", "r", ts="t9"), "k1")
    assert (e1["seq"], e2["seq"]) == (1, 2) and new1 and new2
    assert not new3 and again == e1, "a re-emission returns the original event"
    assert list(e1) == ["v", "session_id", "run_id", "seq", "kind", "ts"]
    assert [e["kind"] for e in await log.read("s")] == ["a", "b"]
    assert await log.last_seq("s") == 2


async def ephemeral_events_take_a_seq_but_are_not_stored(b: Backend) -> None:
    log = b.events
    await log.append("s", _event("a", None), "k1")
    delta, _ = await log.append("s", _event("text.delta", None), None, store=False)
    await log.append("s", _event("b", None), "k2")
    assert delta["seq"] == 2
    assert [(e["seq"], e["kind"]) for e in await log.read("s")] == [(1, "a"), (3, "b")]


async def event_pagination(b: Backend) -> None:
    log = b.events
    for n in range(25):
        await log.append("s", _event("k", None, n=n), f"key{n}")
    page1 = await log.read("s", after_seq=0, limit=10)
    page2 = await log.read("s", after_seq=page1[-1]["seq"], limit=10)
    page3 = await log.read("s", after_seq=page2[-1]["seq"], limit=10)
    assert [e.get("n") for e in page1 + page2 + page3] == list(range(25))
    assert await log.read("s", after_seq=25) == []


async def concurrent_appends_keep_seqs_unique(b: Backend) -> None:
    log = b.events
    got = await asyncio.gather(*(log.append("s", _event("k", None), f"c{n}") for n in range(50)))
    seqs = sorted(e["seq"] for e, _ in got)
    assert seqs == list(range(1, 51))
    assert [e["seq"] for e in await log.read("s", limit=100)] == seqs


async def seq_is_never_reused_after_delete(b: Backend) -> None:
    log = b.events
    await log.append("s", _event("k", None), "x")
    await log.delete("s")
    e, _ = await log.append("s", _event("k", None), "y")
    assert e["seq"] == 2


async def append_many_is_append_of_each_in_order(b: Backend) -> None:
    log = b.events
    first, _ = await log.append("s", _event("a", "r", ts="t1"), "k1")
    got = await log.append_many("s", [
        (_event("b", "r", ts="t2"), "k2", True),
        (_event("a", "r", ts="t9"), "k1", True),  # seen
        (_event("text.delta", "r", ts="t3"), None, False),
        (_event("c", "r", ts="t4"), None, True),
        (_event("d", "r", ts="t5"), "k2", True),  # in batch
    ])
    assert [(e["seq"], e["kind"], new) for e, new in got] == [
        (2, "b", True), (1, "a", False), (3, "text.delta", True), (4, "c", True), (2, "b", False)]
    assert got[1][0] == first, "a re-emission returns the original event"
    assert list(got[0][0]) == ["v", "session_id", "run_id", "seq", "kind", "ts"]
    assert [(e["seq"], e["kind"]) for e in await log.read("s")] == [(1, "a"), (2, "b"), (4, "c")]
    assert await log.last_seq("s") == 4
    assert await log.append_many("s", []) == []
    again = await log.append_many("s", [(_event("b", "r"), "k2", True)])
    assert again == [(got[0][0], False)], "a redelivered transition gets its events back"


async def restore_puts_back_a_lost_log_and_the_counter_goes_on(b: Backend) -> None:
    events = b.events
    archived = [make_event(k, "s", "r", seq=n)
                for n, k in ((1, "run.started"), (2, "message"), (4, "run.ended"))]
    assert await events.restore("s", archived)
    assert await events.read("s") == archived
    assert await events.last_seq("s") == 4
    appended, new = await events.append("s", _event("run.started", "r"), "k1")
    assert new and appended["seq"] == 5, "no seq is reused after a restore"
    assert not await events.restore("s", archived), "a log that is there is never overwritten"
    assert [e["seq"] for e in await events.read("s")] == [1, 2, 4, 5]


async def sessions_index_most_recent_first_with_a_cursor(b: Backend) -> None:
    """Every commit marks its session updated; pages follow each other by (ms, sid) with
    no entry twice or missed, ties within one millisecond included; tenants apart."""
    sessions = b.sessions
    for sid in ("a", "b", "c", "acme.x", "acme.y"):
        assert await sessions.commit(sid, 0, {"status": "idle"}, history_len_before=0, append=[])
        await asyncio.sleep(0.003)
    assert await sessions.commit("a", 1, {"status": "running"}, history_len_before=0, append=[])  # a moves to the top
    index = keys.sessions_index("a")
    listed = await sessions.recently_updated(index, None, 10)
    assert [sid for sid, _ in listed] == ["a", "c", "b"]
    assert listed[0][1] >= listed[1][1] > listed[2][1] > 0
    first = await sessions.recently_updated(index, None, 2)
    rest = await sessions.recently_updated(index, (first[-1][1], first[-1][0]), 2)
    assert [sid for sid, _ in first + rest] == ["a", "c", "b"]
    tenant = await sessions.recently_updated(keys.sessions_index("acme.x"), None, 10)
    assert [sid for sid, _ in tenant] == ["acme.y", "acme.x"]
    assert await sessions.load_many(["a", "nobody", "acme.x"]) == [{"status": "running"}, None, {"status": "idle"}]
    # entries of one millisecond are ordered by sid, and a cursor inside them skips none
    ms = listed[0][1]
    assert await sessions.recently_updated(index, (ms, "a"), 10) == listed[1:]
    await sessions.delete("c")
    assert [sid for sid, _ in await sessions.recently_updated(index, None, 10)] == ["a", "b"]


async def a_step_claim_fences_its_side_effect(b: Backend) -> None:
    steps = b.steps
    first = await steps.claim(BATCH, [CALL_A, CALL_B], ttl_s=0.5)
    assert first.token and first.records == [None, None]
    with pytest.raises(StepHeld):  # a second worker performs nothing while the first lives
        await steps.claim(BATCH, [CALL_A, CALL_B], ttl_s=0.5)
    assert await steps.renew(BATCH, first.token, 0.5)
    await asyncio.sleep(0.7)  # the first worker stopped renewing (paused): its claim expires
    second = await steps.claim(BATCH, [CALL_A, CALL_B], ttl_s=5)
    assert second.token and second.token != first.token
    assert int(second.token.split("|")[1]) > int(first.token.split("|")[1]), "a higher fencing token"
    assert not await steps.renew(BATCH, first.token, 5)
    # The paused worker resumes: its write is refused, the owner's stands.
    with pytest.raises(StepHeld):
        await steps.record_claimed(BATCH, first.token, CALL_A, value={"by": "first"})
    assert await steps.record_claimed(BATCH, second.token, CALL_A, value={"by": "second"}) == {"by": "second"}
    assert await steps.record_claimed(BATCH, second.token, CALL_B, value={"by": "second"}, release=True) == {
        "by": "second"}
    # Everything recorded: a late delivery gets the records and claims nothing.
    late = await steps.claim(BATCH, [CALL_A, CALL_B], ttl_s=5)
    assert late.token is None and late.records == [{"by": "second"}, {"by": "second"}]
    # A record that stands is returned to a writer whose claim expired unchallenged.
    assert await steps.record_claimed(BATCH, first.token, CALL_A, value={"by": "first"}) == {"by": "second"}


def _event(kind: str, run_id: str | None, *, ts: str | None = None, **fields: Any) -> AnyEvent:
    """A body for the event log: its checks use kinds of their own (`a`, `k`), which the log
    stores as it stores any event."""
    return make_event(kind, "s", run_id, seq=0, ts=ts, **fields)


def _events(sid: str, *specs: tuple[str, str | None]) -> list[tuple[AnyEvent, str | None, bool]]:
    return [(make_event(kind, sid, "r1", seq=0, turn=1), key, kind != "text.delta") for kind, key in specs]


async def commit_with_events_writes_state_history_and_events_together(b: Backend) -> None:
    """Capability COMMIT_WITH_EVENTS: a router transition's state, history and leading
    events at once, all of them or, when the version moved, none."""
    sessions, log = b.sessions, b.events
    if not sessions.supports(Capability.COMMIT_WITH_EVENTS):
        with pytest.raises(Unsupported):
            await sessions.commit_with_events("s", 0, {}, history_len_before=0, append=[], events=[])
        return
    assert log.supports(Capability.COMMIT_WITH_EVENTS), "the backend's event log takes the commit's events"
    sid = "cwe"
    stored = await sessions.commit_with_events(sid, 0, {"n": 1}, history_len_before=0, append=[{"role": "user", "content": "hi"}],
                                               events=_events(sid, ("run.started", "a"), ("text.delta", None)))
    assert stored is not None
    assert [(e["seq"], e["kind"], new) for e, new in stored] == [(1, "run.started", True), (2, "text.delta", True)]
    assert await sessions.load(sid) == ({"n": 1}, 1)
    assert await sessions.history(sid) == [{"role": "user", "content": "hi"}]
    assert [e["seq"] for e in await log.read(sid)] == [1]  # text.delta takes a seq, is not stored

    # A replica that decided on version 0 too: nothing of its transition is written.
    assert await sessions.commit_with_events(sid, 0, {"n": 99}, history_len_before=0, append=[{"role": "user", "content": "x"}],
                                             events=_events(sid, ("message", "b"))) is None
    assert await sessions.load(sid) == ({"n": 1}, 1)
    assert await sessions.history(sid) == [{"role": "user", "content": "hi"}]
    assert await log.last_seq(sid) == 2 and [e["seq"] for e in await log.read(sid)] == [1]

    # A known dedup key returns the original event; a new one continues the seqs.
    again = await sessions.commit_with_events(sid, 1, {"n": 2}, history_len_before=1, append=[], events=_events(sid, ("run.started", "a"),
                                                                            ("message", "c")))
    assert again is not None
    assert [(e["seq"], new) for e, new in again] == [(1, False), (3, True)]
    assert await sessions.load(sid) == ({"n": 2}, 2)
    assert [e["seq"] for e in await log.read(sid)] == [1, 3]
    # And the events log's own append continues after them.
    (event, new), = await log.append_many(sid, _events(sid, ("error", "d")))
    assert (event["seq"], new) == (4, True)


async def raise_seq_moves_the_counter_up_and_never_down(b: Backend) -> None:
    """Capability SEQ_FLOOR: a session's seqs continue after a floor (the last one the
    events stream holds), and a floor below the counter changes nothing."""
    log = b.events
    if not log.supports(Capability.SEQ_FLOOR):
        with pytest.raises(Unsupported):
            await log.raise_seq("s", 10)
        return
    await log.raise_seq("lost", 41)
    first, _ = await log.append("lost", _event("run.started", "r"), "k1")
    assert first["seq"] == 42, "a lost session's seqs continue after the floor"
    await log.raise_seq("lost", 7)
    second, _ = await log.append("lost", _event("message", "r"), "k2")
    assert second["seq"] == 43, "a floor below the counter changes nothing"


async def the_history_reads_in_another_stores_pipeline(b: Backend) -> None:
    """Capability PIPELINED_HISTORY: the history another Redis store reads in its own round
    trip, through the session store's reader, is the committed history of that session."""
    sessions = b.sessions
    if not sessions.supports(Capability.PIPELINED_HISTORY):
        with pytest.raises(Unsupported):
            sessions.pipelined_history("s")
        return
    assert b.redis is not None, "a backend with PIPELINED_HISTORY names its Redis"
    await sessions.commit("s", 0, {}, history_len_before=0, append=[msg("a"), msg("b", "assistant")])
    await sessions.commit("t", 0, {}, history_len_before=0, append=[msg("c")])
    pipe = b.redis.pipeline(transaction=False)
    for sid, start, stop in (("s", 0, -1), ("s", 1, 1), ("t", 0, -1)):
        sessions.pipelined_history(sid).queue(pipe, start, stop)
    whole, part, other = (sessions.pipelined_history("s").messages(r) for r in await pipe.execute())
    assert whole == await sessions.history("s")
    assert part == await sessions.history("s", 1, 1)
    assert other == await sessions.history("t") != whole


async def forks_are_listed_once_in_the_order_they_came(b: Backend) -> None:
    sessions = b.sessions
    assert await sessions.forks("src") == []
    for fork in ("f2", "f1", "f2"):
        await sessions.add_fork("src", fork)
    assert await sessions.forks("src") == ["f2", "f1"]
    assert await sessions.forks("f1") == [], "a fork's own list is its own"


CHECKS: tuple[Check, ...] = (
    new_session_loads_as_none_version_zero,
    commit_bumps_version_and_appends_history,
    commit_with_stale_version_changes_nothing,
    concurrent_commits_on_one_version_exactly_one_wins,
    commit_truncates_history_beyond_the_counted_length,
    delete_removes_state_and_history,
    step_records,
    put_if_absent_keeps_the_first_record,
    event_seq_strictly_increases_and_keys_dedup,
    ephemeral_events_take_a_seq_but_are_not_stored,
    event_pagination,
    concurrent_appends_keep_seqs_unique,
    seq_is_never_reused_after_delete,
    append_many_is_append_of_each_in_order,
    restore_puts_back_a_lost_log_and_the_counter_goes_on,
    sessions_index_most_recent_first_with_a_cursor,
    forks_are_listed_once_in_the_order_they_came,
    a_step_claim_fences_its_side_effect,
    commit_with_events_writes_state_history_and_events_together,
    raise_seq_moves_the_counter_up_and_never_down,
    the_history_reads_in_another_stores_pipeline,
)
"""Every check, in order: the base ones, then those of the capabilities."""
