"""KeyedLock: one holder per key at a time, other keys free, nothing kept once unused
(a waiter cancelled, a block that raises)."""

from __future__ import annotations

import asyncio

import pytest

from loopwire.shared.runtime.keyed_lock import KeyedLock


async def test_one_holder_per_key_in_order_and_other_keys_free() -> None:
    locks = KeyedLock()
    order: list[str] = []
    inside = asyncio.Event()
    go = asyncio.Event()

    async def first() -> None:
        async with locks.hold("a"):
            order.append("first in")
            inside.set()
            await go.wait()
            order.append("first out")

    async def second() -> None:
        await inside.wait()
        async with locks.hold("a"):
            order.append("second in")

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await inside.wait()
    async with locks.hold("b"):  # another key is not held up
        order.append("b")
    go.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "b", "first out", "second in"]
    assert locks._locks == {}


async def test_a_raising_block_and_a_cancelled_waiter_leave_nothing_held() -> None:
    locks = KeyedLock()
    with pytest.raises(RuntimeError):
        async with locks.hold("a"):
            raise RuntimeError("boom")
    assert locks._locks == {}

    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("a"):
            held.set()
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("a"):
            raise AssertionError("a cancelled waiter never holds the lock")

    h = asyncio.create_task(holder())
    await held.wait()
    w = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    assert locks._locks["a"][1] == 2
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    assert locks._locks["a"][1] == 1
    release.set()
    await h
    assert locks._locks == {}
    async with locks.hold("a"):  # free again
        pass
