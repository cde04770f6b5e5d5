"""A step's claim is kept alive while its call runs (shared/stores/step_store.py, `renewed`):
renewed every third of its TTL, never after the call ends, not after another owner took
it, and again after Redis was away."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from loopwire.shared.stores.step_store import InMemoryStepStore, renewed

pytestmark = pytest.mark.unit

TTL_S = 0.3


class CountingStore(InMemoryStepStore):
    """The in-memory store, with each renewal's time kept and failures to order."""

    def __init__(self) -> None:
        super().__init__()
        self.renewals: list[float] = []
        self.failures: list[BaseException] = []

    async def renew(self, claim_key: str, token: str, ttl_s: float) -> bool:
        self.renewals.append(time.monotonic())
        if self.failures:
            raise self.failures.pop(0)
        return await super().renew(claim_key, token, ttl_s)


async def claimed(store: CountingStore) -> str:
    claim = await store.claim("claim:s", ["rec:s"], TTL_S)
    assert claim.token is not None
    return claim.token


async def test_a_long_call_keeps_its_claim_and_renewals_stop_with_it() -> None:
    store = CountingStore()
    token = await claimed(store)
    async with renewed(store, "claim:s", token, ttl_s=TTL_S):
        await asyncio.sleep(TTL_S * 2.5)  # past two TTLs' worth of thirds
        assert store.claims["claim:s"][1] > time.monotonic(), "still held"
    assert len(store.renewals) >= 3
    gaps = [b - a for a, b in zip(store.renewals, store.renewals[1:], strict=False)]
    assert all(gap >= TTL_S / 3 * 0.9 for gap in gaps), gaps
    ended = len(store.renewals)
    await asyncio.sleep(TTL_S)
    assert len(store.renewals) == ended, "no renewal after the call ended"


async def test_a_short_call_never_renews() -> None:
    store = CountingStore()
    token = await claimed(store)
    async with renewed(store, "claim:s", token, ttl_s=TTL_S):
        await asyncio.sleep(0)
    await asyncio.sleep(TTL_S / 3 * 1.5)
    assert store.renewals == []


async def test_renewals_stop_once_another_owner_holds_the_claim() -> None:
    store = CountingStore()
    token = await claimed(store)
    async with renewed(store, "claim:s", token, ttl_s=TTL_S):
        store.claims["claim:s"] = ("someone-else|2", time.monotonic() + 60)
        await asyncio.sleep(TTL_S * 1.5)
    assert len(store.renewals) == 1, "the first renewal found the claim gone; none after it"


async def test_renewed_again_after_redis_was_away_and_a_failure_does_not_fail_the_call() -> None:
    store = CountingStore()
    store.failures = [RedisConnectionError("away")]
    token = await claimed(store)
    async with renewed(store, "claim:s", token, ttl_s=TTL_S):
        await asyncio.sleep(TTL_S * 0.8)
    assert len(store.renewals) == 2, "the outage's renewal, then one that reached the store"

    store.failures = [ValueError("a bug in the store")]  # not an outage: renewals stop, the call goes on
    async with renewed(store, "claim:s", token, ttl_s=TTL_S):
        await asyncio.sleep(TTL_S * 0.8)
    assert len(store.renewals) == 3


async def test_the_call_waits_for_a_renewal_under_way_rather_than_cancelling_it() -> None:
    store = CountingStore()
    token = await claimed(store)
    finished: list[bool] = []

    class SlowStore(CountingStore):
        async def renew(self, claim_key: str, token: str, ttl_s: float) -> bool:
            await asyncio.sleep(0.2)
            finished.append(True)
            return True

    slow = SlowStore()
    slow.claims = store.claims
    async with renewed(slow, "claim:s", token, ttl_s=TTL_S):
        await asyncio.sleep(TTL_S / 3 + 0.05)  # the renewal is under way when the call ends
    assert finished == [True]
