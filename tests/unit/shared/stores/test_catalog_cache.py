"""CatalogCache: callers that find the copy expired together share one read."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.stores.tool_catalog import CatalogCache, CatalogEntry
from tests.loop_errors import LostErrors


class CountingRedis:
    """The catalog reads CatalogCache makes, counted, each taking a moment (its owners'
    listings are read with each: empty here, the entry has no owner)."""

    def __init__(self) -> None:
        self.reads = 0
        self.fail_next = False

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        if key == keys.TOOL_CATALOG_OWNERS:
            return {}
        self.reads += 1
        await asyncio.sleep(0.01)
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("redis went away")
        entry = CatalogEntry(name="noop", description="", input_schema={"type": "object"},
                             source="python", exclusive=False, seen_at=time.time())
        return {b"noop": entry.to_json()}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


SETTINGS = SimpleNamespace(discovery_interval_s=2.0, discovery_misses=3)


async def test_concurrent_callers_share_one_read() -> None:
    redis, clock = CountingRedis(), Clock()
    cache = CatalogCache(redis, SETTINGS, clock=clock)  # type: ignore[arg-type]
    got = await asyncio.gather(*(cache.get(["noop"]) for _ in range(50)))
    assert redis.reads == 1
    assert all(list(specs) == ["noop"] for specs in got)
    await cache.get(["noop"])
    assert redis.reads == 1  # still fresh
    clock.now += 1.5  # past CACHE_TTL_S
    await asyncio.gather(*(cache.get() for _ in range(50)))
    assert redis.reads == 2


async def test_a_failed_read_reaches_every_waiter_and_the_next_call_reads_again() -> None:
    redis = CountingRedis()
    redis.fail_next = True
    cache = CatalogCache(redis, SETTINGS, clock=Clock())  # type: ignore[arg-type]
    results = await asyncio.gather(*(cache.get() for _ in range(5)), return_exceptions=True)
    assert redis.reads == 1
    assert all(isinstance(r, ConnectionError) for r in results)
    assert list(await cache.get()) == ["noop"]
    assert redis.reads == 2


async def test_a_cancelled_caller_leaves_the_read_to_the_others() -> None:
    redis = CountingRedis()
    cache = CatalogCache(redis, SETTINGS, clock=Clock())  # type: ignore[arg-type]
    first = asyncio.ensure_future(cache.get())
    second = asyncio.ensure_future(cache.get())
    await asyncio.sleep(0)
    first.cancel()
    assert list(await second) == ["noop"]
    with pytest.raises(asyncio.CancelledError):
        await first
    assert redis.reads == 1


async def test_a_name_the_copy_lacks_reads_again_at_once() -> None:
    redis = CountingRedis()
    cache = CatalogCache(redis, SETTINGS, clock=Clock())  # type: ignore[arg-type]
    await cache.get(["noop"])
    await cache.get(["brand_new"])
    assert redis.reads == 2


async def test_a_failed_read_whose_only_waiter_was_cancelled_leaves_no_unretrieved_error(
        unretrieved_errors: LostErrors) -> None:
    redis = CountingRedis()
    redis.fail_next = True
    cache = CatalogCache(redis, SETTINGS, clock=Clock())  # type: ignore[arg-type]
    waiter = asyncio.ensure_future(cache.get())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0.05)  # the read fails with no one waiting
    assert redis.reads == 1
    del waiter
    lost = await unretrieved_errors()
    assert not lost, lost
