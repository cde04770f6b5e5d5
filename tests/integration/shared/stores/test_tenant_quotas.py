"""The tenants' slots, queues and daily usage (shared/stores/tenant_quotas.py) against a
real Redis: slots granted while free and nobody waits, queued in arrival order up to
max_queued, refused beyond; a release frees the slot once and hands it to the queue's
head; asking again for the same run gives the same answer; usage counted by running
totals adds each token once, whatever repeats."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.contract.tenant_limits import TenantLimit
from loopwire.shared.stores.tenant_quotas import TenantQuotaStore

pytestmark = pytest.mark.integration

ONE = TenantLimit(max_running=1, max_queued=2)


async def test_slots_queue_in_arrival_order_and_free_once(redis_client: Any) -> None:
    store = TenantQuotaStore(redis_client)
    first = await store.settle("acme", ONE, acquire=("r1", "acme.s1"))
    assert (first.verdict, first.running, first.queued) == ("granted", 1, 0)
    second = await store.settle("acme", ONE, acquire=("r2", "acme.s2"))
    third = await store.settle("acme", ONE, acquire=("r3", "acme.s3"))
    assert (second.verdict, second.position, third.verdict, third.position) == ("queued", 1, "queued", 2)
    refused = await store.settle("acme", ONE, acquire=("r4", "acme.s4"))
    assert (refused.verdict, refused.running, refused.queued) == ("refused", 1, 2)
    # asked again, a run keeps what it has: its slot, its place
    assert (await store.settle("acme", ONE, acquire=("r1", "acme.s1"))).verdict == "granted"
    again = await store.settle("acme", ONE, acquire=("r3", "acme.s3"))
    assert (again.verdict, again.position, again.queued) == ("queued", 2, 2)
    # another tenant's queue is its own
    assert (await store.settle("globex", ONE, acquire=("g1", "globex.s1"))).verdict == "granted"

    freed = await store.settle("acme", ONE, release=["r1"])
    assert freed.promoted == [("r2", "acme.s2")] and (freed.running, freed.queued) == (1, 1)
    assert (await store.settle("acme", ONE, release=["r1"])).promoted == [], "released once"
    # a queued run that leaves (an abort) gives up its place, not a slot
    left = await store.settle("acme", ONE, release=["r3"])
    assert (left.promoted, left.running, left.queued) == ([], 1, 0)
    # released and acquired in one call (a run that ends and the next that waits)
    nxt = await store.settle("acme", ONE, release=["r2"], acquire=("r2.next", "acme.s2"))
    assert (nxt.verdict, nxt.running, nxt.queued) == ("granted", 1, 0)
    snap = await store.snapshot("acme")
    assert snap.slots == {"r2.next": "acme.s2"} and snap.queue == []


async def test_a_tenant_without_max_running_is_counted_and_never_waits(redis_client: Any) -> None:
    store = TenantQuotaStore(redis_client)
    for n in range(5):
        assert (await store.settle("*", TenantLimit(), acquire=(f"r{n}", f"s{n}"))).verdict == "granted"
    assert await store.counts("*") == (5, 0)
    # max_queued 0: no queue at all
    closed = TenantLimit(max_running=1, max_queued=0)
    await store.settle("t", closed, acquire=("a", "t.a"))
    assert (await store.settle("t", closed, acquire=("b", "t.b"))).verdict == "refused"


async def test_a_lowered_limit_promotes_nobody_and_a_raised_one_promotes_in_order(redis_client: Any) -> None:
    store = TenantQuotaStore(redis_client)
    two = TenantLimit(max_running=1)
    for n in range(4):
        await store.settle("t", two, acquire=(f"r{n}", f"t.s{n}"))
    raised = await store.settle("t", TenantLimit(max_running=3))
    assert raised.promoted == [("r1", "t.s1"), ("r2", "t.s2")] and raised.queued == 1


async def test_usage_counts_each_token_once_by_running_totals(redis_client: Any) -> None:
    store = TenantQuotaStore(redis_client)
    day = "2026-12-02"
    first = await store.count("acme", day, [("r1", 100, 0.5)])
    assert (first.tokens, first.usd, first.tokens_today) == (100, 0.5, 100)
    again = await store.count("acme", day, [("r1", 100, 0.5)])
    assert (again.tokens, again.usd, again.tokens_today) == (0, 0.0, 100), "a total reported again adds nothing"
    # a later total of r1 and an older (replayed) one of it together, with another run's
    grown = await store.count("acme", day, [("r1", 60, 0.1), ("r1", 150, 0.75), ("r2", 40, 0.0)])
    assert (grown.tokens, grown.tokens_today) == (90, 190) and grown.usd == pytest.approx(0.25)
    assert await store.today("acme", day) == (190, pytest.approx(0.75))
    # a run that goes on past midnight adds only what it spent since to the new day
    assert (await store.count("acme", "2026-12-03", [("r1", 170, 0.75)])).tokens_today == 20
    assert await redis_client.ttl(keys.tenant_day("acme", day)) > 0
    assert await store.today("globex", day) == (0, 0.0)
