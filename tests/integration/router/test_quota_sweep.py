"""The tenants' sweep (services/router/shell/quota_sweep.py) against a real Redis: records left
by a router that crashed between a session's commit and its tenant's keys are repaired
from the sessions' stored states (a slot of an ended run released and handed on, a slot
granted to a run nobody started admitted, an unannounced queue place announced), the
records the sessions match are left alone, and the gauges show the fleet's numbers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from loopwire.router.shell.quota_keeper import Admission, QuotaKeeper
from loopwire.router.shell.quota_sweep import QuotaSweep
from loopwire.shared.contract.tenant_limits import TenantLimit, TenantLimits
from loopwire.shared.observability import metrics
from loopwire.shared.stores.session_store import RedisSessionStore
from loopwire.shared.stores.tenant_quotas import TenantQuotaStore
from tests.router_driver import CFG, Driver

pytestmark = pytest.mark.integration

LIMITS = TenantLimits.parse({"acme": TenantLimit(max_running=1, tokens_per_day=500)}, tenants=True)
QCFG = replace(CFG, tenant_limits=LIMITS)


async def committed(store: RedisSessionStore, d: Driver) -> None:
    raw, version = await store.load(d.state.session_id)
    assert await store.commit(d.state.session_id, version, d.state.dump_json(), history_len_before=0, append=[])


async def test_the_sweep_repairs_what_a_crash_left_and_leaves_the_rest(redis_client: Any) -> None:
    sessions = RedisSessionStore(redis_client)
    quotas = TenantQuotaStore(redis_client)
    keeper = QuotaKeeper(quotas, LIMITS, labels=5)
    limit = LIMITS.for_tenant("acme")

    ended, granted, announced, waiting = (Driver(QCFG, sid=f"acme.{n}") for n in ("ended", "granted", "q1", "q2"))
    ended.start(run_id="r-ended")
    ended.admit("granted")
    ended.abort()  # its end committed; the release was lost with the router
    for d, run_id in ((granted, "r-granted"), (announced, "r-q1"), (waiting, "r-q2")):
        d.start(run_id=run_id)
    announced.admit("queued", position=2)
    for d in (ended, granted, announced, waiting):
        await committed(sessions, d)
    # the tenant's keys as the crashed router left them: r-ended holds the only slot
    await quotas.register("acme")
    await quotas.settle("acme", limit, acquire=("r-ended", "acme.ended"))
    for d in (granted, announced, waiting):
        await quotas.settle("acme", limit, acquire=(d.state.waiting.run_id, d.state.session_id))  # type: ignore[union-attr]
    await quotas.count("acme", "2026-12-02", [("r-ended", 120, 0.0)])

    made: list[Admission] = []

    async def admit(admissions: list[Admission]) -> None:
        made.extend(admissions)

    sweep = QuotaSweep(keeper, sessions, admit, interval_s=1)
    noon = int(datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()) * 10**9
    assert await sweep.sweep(now_ns=noon, reconcile=True) == made
    # r-ended released; its slot handed to r-granted (the head of the queue), which waits
    # for it: admitted; r-q1 was announced already; r-q2 waits unannounced: announced
    assert made == [Admission("acme.granted", "r-granted", "granted"), Admission("acme.q2", "r-q2", "queued", 2)]
    snap = await quotas.snapshot("acme")
    assert snap.slots == {"r-granted": "acme.granted"} and [r for r, _ in snap.queue] == ["r-q1", "r-q2"]
    assert metrics.child(metrics.TENANT_RUNNING, tenant="acme")._value.get() == 1
    assert metrics.child(metrics.TENANT_QUEUED, tenant="acme")._value.get() == 2
    assert metrics.child(metrics.TENANT_USAGE_TODAY, tenant="acme", allowance="tokens")._value.get() == 120
    assert metrics.child(metrics.TENANT_ALLOWANCE, tenant="acme", allowance="tokens")._value.get() == 500

    # once the admissions are applied the sessions match the records: nothing more to do
    granted.admit("granted")
    waiting.admit("queued", position=2)
    for d in (granted, waiting):
        await committed(sessions, d)
    made.clear()
    assert await sweep.sweep(reconcile=True) == []
    assert (await quotas.snapshot("acme")).slots == {"r-granted": "acme.granted"}


async def test_one_router_reconciles_per_interval(redis_client: Any) -> None:
    keeper = QuotaKeeper(TenantQuotaStore(redis_client), LIMITS, labels=5)
    await keeper.store.register("acme")
    one, two = (QuotaSweep(keeper, RedisSessionStore(redis_client), _nothing, interval_s=5) for _ in range(2))
    assert await keeper.store.claim_sweep(one.owner, 5)
    assert not await keeper.store.claim_sweep(two.owner, 5)


async def _nothing(admissions: list[Admission]) -> None:
    return None
