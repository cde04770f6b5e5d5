"""RedisSessionStore.commit_with_events: a router transition's state, history and leading
events in one script — all of them or, when the version moved, none."""

from __future__ import annotations

import uuid
from typing import Any

from loopwire.shared.contract.protocol import make_event
from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.session_store import RedisSessionStore


def events(sid: str, *specs: tuple[str, str | None]) -> list[tuple[dict[str, Any], str | None, bool]]:
    return [(make_event(kind, sid, "r1", 0, turn=1), key, kind != "text.delta") for kind, key in specs]


async def test_state_history_and_events_are_written_together(redis_client: Any) -> None:
    sessions, log = RedisSessionStore(redis_client), RedisEventLog(redis_client)
    sid = f"cwe-{uuid.uuid4().hex[:8]}"
    stored = await sessions.commit_with_events(sid, 0, {"n": 1}, 0, [{"role": "user", "content": "hi"}],
                                               events(sid, ("run.started", "a"), ("text.delta", None)))
    assert stored is not None
    assert [(e["seq"], e["kind"], new) for e, new in stored] == [(1, "run.started", True), (2, "text.delta", True)]
    assert await sessions.load(sid) == ({"n": 1}, 1)
    assert await sessions.history(sid) == [{"role": "user", "content": "hi"}]
    assert [e["seq"] for e in await log.read(sid)] == [1]  # text.delta takes a seq, is not stored

    # A replica that decided on version 0 too: nothing of its transition is written.
    assert await sessions.commit_with_events(sid, 0, {"n": 99}, 0, [{"role": "user", "content": "x"}],
                                             events(sid, ("message", "b"))) is None
    assert await sessions.load(sid) == ({"n": 1}, 1)
    assert await sessions.history(sid) == [{"role": "user", "content": "hi"}]
    assert await log.last_seq(sid) == 2 and [e["seq"] for e in await log.read(sid)] == [1]

    # A known dedup key returns the original event; a new one continues the seqs.
    again = await sessions.commit_with_events(sid, 1, {"n": 2}, 1, [], events(sid, ("run.started", "a"),
                                                                            ("message", "c")))
    assert again is not None
    assert [(e["seq"], new) for e, new in again] == [(1, False), (3, True)]
    assert await sessions.load(sid) == ({"n": 2}, 2)
    assert [e["seq"] for e in await log.read(sid)] == [1, 3]
    # And the events log's own append continues after them.
    (event, new), = await log.append_many(sid, events(sid, ("error", "d")))
    assert (event["seq"], new) == (4, True)
