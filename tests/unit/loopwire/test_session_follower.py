"""SessionFollower (loopwire.client): each event once, in seq order, also when two
replicas' publishes arrive crossed, and without waiting forever on a seq never published."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from loopwire import client
from loopwire.client import SessionFollower


class Msg:
    def __init__(self, event: dict[str, Any]) -> None:
        self.data = orjson.dumps(event)


async def feed(follower: SessionFollower, *seqs: int) -> None:
    for seq in seqs:
        await follower.on_msg(Msg({"seq": seq, "kind": "message"}))


async def take(follower: SessionFollower, n: int) -> list[int]:
    return [(await asyncio.wait_for(follower.__anext__(), 5))["seq"] for _ in range(n)]


async def test_crossed_events_come_out_in_seq_order_each_once() -> None:
    follower = SessionFollower()
    await feed(follower, 1, 2, 4, 5, 3, 3, 2, 6)
    assert await take(follower, 6) == [1, 2, 3, 4, 5, 6]
    assert follower.skipped == 2 and follower.last_seq == 6


async def test_a_gap_that_never_fills_holds_the_next_events_only_briefly(monkeypatch: Any) -> None:
    monkeypatch.setattr(client, "REORDER_HOLD_S", 0.2)
    follower = SessionFollower()
    await feed(follower, 1, 3, 4)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await take(follower, 3) == [1, 3, 4]
    assert 0.15 <= loop.time() - started < 2
    await feed(follower, 2)  # arrives after the hold gave up on it: seen as already passed
    await feed(follower, 5)
    assert await take(follower, 1) == [5] and follower.skipped == 1


async def test_following_new_events_starts_at_whatever_seq_comes_first() -> None:
    follower = SessionFollower(first_any=True)
    await feed(follower, 41, 42, 44, 43)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await take(follower, 4) == [41, 42, 43, 44]
    assert loop.time() - started < client.REORDER_HOLD_S  # nothing was held for a gap


async def test_after_seq_skips_what_the_client_saw() -> None:
    follower = SessionFollower(after_seq=10)
    await feed(follower, 9, 10, 11, 12)
    assert await take(follower, 2) == [11, 12] and follower.skipped == 2
