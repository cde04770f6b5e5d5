"""The tenants' sweep: their slots and queues reconciled with their sessions, and the
loopwire_tenant_* gauges refreshed, every LOOPWIRE_TENANT_SWEEP_S.

A slot or queue place is written after its run's session committed the run
(tenant_quotas.py), and given back after the commit that stops referring to it. A
router that crashes in between leaves a record the sessions no longer match; the
stored outbox repairs it when the input that crashed is redelivered, and this sweep
repairs what is left, comparing each record with its session's stored state:

- a slot whose session runs that run: right;
- a slot whose session still waits for that run (the router that handed it the slot
  died before starting it): the run is admitted now;
- a queue place whose session waits for that run unannounced: announced;
- anything else (the run ended, was aborted, or its session's state is gone): released,
  which hands the slot to the head of the queue.

A record is only ever written for a run its session had committed, and a session never
refers to a run again once it stopped, so what this releases is surely over: the slots
stay exact, whichever router died when. One router of the fleet reconciles per interval
(a Redis lock); every router refreshes its gauges, so each reports the fleet's numbers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from loopwire.shared.contract.session_state import stored_state
from loopwire.shared.contract.tenant_limits import utc_day
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.periodic import PeriodicSweep
from loopwire.shared.stores.session_store import SessionStore
from loopwire.shared.stores.tenant_quotas import Snapshot

from .quota_keeper import Admission, QuotaKeeper

log = logging.getLogger("loopwire.router.quotas")


class QuotaSweep(PeriodicSweep):
    name = "router-tenant-sweep"
    log = log

    def __init__(self, keeper: QuotaKeeper, sessions: SessionStore,
                 admit: Callable[[list[Admission]], Awaitable[None]], *, interval_s: float) -> None:
        self.keeper = keeper
        self.sessions = sessions
        self.admit = admit
        self.interval_s = max(0.1, interval_s)
        self.owner = uuid.uuid4().hex[:12]

    async def sweep(self, now_ns: int | None = None, reconcile: bool | None = None) -> list[Admission]:
        """One pass; returns the admissions it made. `reconcile`: whether this router
        reconciles (default: when it takes this interval's lock)."""
        store = self.keeper.store
        tenants = await store.tenants()
        if reconcile is None:
            reconcile = bool(tenants) and await store.claim_sweep(self.owner, self.interval_s * 0.9)
        admitted: list[Admission] = []
        gauges = _Gauges()
        day = utc_day(now_ns if now_ns is not None else time.time_ns())
        for tenant in tenants:
            snap = await store.snapshot(tenant)
            if reconcile:
                made, snap = await self._reconcile(tenant, snap)
                admitted += made
            tokens, usd = await store.today(tenant, day)
            gauges.add(tenant, running=len(snap.slots), queued=len(snap.queue), tokens=tokens, usd=usd, keeper=self.keeper)
        gauges.publish()
        if admitted:
            await self.admit(admitted)
        return admitted

    async def _reconcile(self, tenant: str, snap: Snapshot) -> tuple[list[Admission], Snapshot]:
        records = [*snap.slots.items(), *snap.queue]
        if not records:
            return [], snap
        states = await self.sessions.load_many([sid for _, sid in records])
        runs = {run: _runs_of(state) for (run, _), state in zip(records, states, strict=True)}
        release = [run for run, (current, waiting, _) in runs.items() if run not in (current, waiting)]
        if release:
            log.warning("tenant %s: releasing %d slot(s) or place(s) of runs that are over: %s",
                        tenant, len(release), ", ".join(release))
        # Also hands the slots that are free (released, or a raised max_running) to the queue's head.
        settled = await self.keeper.store.settle(tenant, self.keeper.limits.for_tenant(tenant), release=release)
        if release or settled.promoted:
            snap = await self.keeper.store.snapshot(tenant)
        admitted = []
        for run, sid in snap.slots.items():  # granted (here, or before a crash) and not started
            if run in runs and runs[run][1] == run:
                admitted.append(Admission(sid, run, "granted"))
        for n, (run, sid) in enumerate(snap.queue, 1):  # waiting, never told its place
            if run in runs and runs[run][1] == run and not runs[run][2]:
                admitted.append(Admission(sid, run, "queued", position=n))
        if admitted:
            log.warning("tenant %s: answering %d waiting run(s) whose answer was not applied: %s", tenant,
                        len(admitted), ", ".join(f"{a.run_id} ({a.verdict})" for a in admitted))
        return admitted, snap


def _runs_of(state: dict[str, Any] | None) -> tuple[str | None, str | None, bool]:
    """(the run in progress, the run waiting, whether the waiting one was announced) of a
    stored session state."""
    if state is None:
        return None, None, False
    st = stored_state(state)
    waiting = st.waiting
    return (st.run.run_id if st.run is not None else None, waiting.run_id if waiting is not None else None,
            waiting is not None and waiting.position is not None)


class _Gauges:
    """The gauges of one sweep, summed per label (`other` holds several tenants)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.allowances: dict[str, tuple[int | None, float | None]] = {}

    def add(self, tenant: str, *, running: int, queued: int, tokens: int, usd: float, keeper: QuotaKeeper) -> None:
        label = metrics.tenant_label(tenant)
        row = self.values.setdefault(label, [0, 0, 0, 0.0])
        for i, value in enumerate((running, queued, tokens, usd)):
            row[i] += value
        if label != "other":
            limit = keeper.limits.for_tenant(tenant)
            self.allowances[label] = (limit.tokens_per_day, limit.usd_per_day)

    def publish(self) -> None:
        for label, (running, queued, tokens, usd) in self.values.items():
            metrics.child(metrics.TENANT_RUNNING, tenant=label).set(running)
            metrics.child(metrics.TENANT_QUEUED, tenant=label).set(queued)
            metrics.child(metrics.TENANT_USAGE_TODAY, tenant=label, allowance="tokens").set(tokens)
            metrics.child(metrics.TENANT_USAGE_TODAY, tenant=label, allowance="usd").set(usd)
        for label, (tokens_per_day, usd_per_day) in self.allowances.items():
            for allowance, value in (("tokens", tokens_per_day), ("usd", usd_per_day)):
                if value is not None:
                    metrics.child(metrics.TENANT_ALLOWANCE, tenant=label, allowance=allowance).set(value)
