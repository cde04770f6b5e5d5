"""The router shell's side of tenant limits (tenant_quotas.py is the core's): reading a
tenant's usage of the day for the core, settling the `TenantSlot` and
`CountTenantUsage` effects on the tenant's keys (shared/stores/tenant_quotas.py) after a
commit, and the loopwire_tenant_* metrics those calls return.

Settling a slot answers for runs of other sessions too: a run that ends hands its slot
to the head of its tenant's queue. Each answer is an `Admission`: the shell applies one
for the session it holds at once (an `AdmissionInput`), and sends one for another
session as a durable work message to the routers (`TenantAdmission`), so the run starts
even if this router dies first (service.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import TenantAdmission
from loopwire.shared.contract.tenant_limits import TenantLimits, utc_day
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.tenant_quotas import Settled, TenantQuotaStore

from ..core.effects import CountTenantUsage, TenantSlot
from ..core.inputs import AdmissionInput
from ..core.settings import RouterSettings


@dataclass(frozen=True)
class Admission:
    """The tenant's answer for run `run_id` of session `sid`."""

    sid: str
    run_id: str
    verdict: str
    position: int = 0

    def as_input(self) -> AdmissionInput:
        # The same id from whichever router answers (the one that freed the slot, the sweep):
        # the core applies it once.
        return AdmissionInput(input_id=message_ids.admission_id(self.run_id, self.verdict), run_id=self.run_id,
                              verdict=self.verdict, position=self.position)  # type: ignore[arg-type]

    def as_envelope(self) -> TenantAdmission:
        """The answer as a work message to whichever router takes it."""
        return TenantAdmission(session_id=self.sid, run_id=self.run_id,
                               step_id=message_ids.admission_id(self.run_id, self.verdict),
                               verdict=self.verdict, position=self.position)  # type: ignore[arg-type]


class QuotaKeeper:
    def __init__(self, store: TenantQuotaStore, limits: TenantLimits, labels: int) -> None:
        self.store = store
        self.limits = limits
        self._registered: set[str] = set()
        metrics.configure_tenant_labels(labels, limits.named if limits.tenants else [limits.tenant_of("")])

    @classmethod
    def of(cls, ctx: ServiceContext[RouterSettings]) -> QuotaKeeper | None:
        """The keeper of LOOPWIRE_TENANT_LIMITS; None when it is unset (nothing is counted)."""
        limits = ctx.settings.limits_table()
        return None if limits is None else cls(TenantQuotaStore(ctx.redis), limits, ctx.settings.tenant_metrics_labels)

    async def today(self, sid: str, now_ns: int) -> tuple[int, float] | None:
        """The tenant's usage of the day, when it has an allowance to judge it against."""
        if not self.limits.for_session(sid).has_allowance:
            return None
        return await self.store.today(self.limits.tenant_of(sid), utc_day(now_ns))

    async def settle(self, sid: str, effect: TenantSlot) -> list[Admission]:
        tenant = self.limits.tenant_of(sid)
        if tenant not in self._registered:
            await self.store.register(tenant)  # the sweep walks the tenants registered
            self._registered.add(tenant)
        settled = await self.store.settle(tenant, self.limits.for_tenant(tenant), release=effect.release,
                                          acquire=(effect.acquire, sid) if effect.acquire else None)
        self._gauge(tenant, settled)
        out = [Admission(s, run, "granted") for run, s in settled.promoted]
        if effect.acquire and settled.verdict:
            out.insert(0, Admission(sid, effect.acquire, settled.verdict, position=settled.position))
        return out

    async def count(self, sid: str, effect: CountTenantUsage) -> None:
        tenant = self.limits.tenant_of(sid)
        counted = await self.store.count(tenant, effect.day, effect.totals)
        label = metrics.tenant_label(tenant)
        # What the script added is added nowhere else: the counters count each token once, fleet-wide.
        if counted.tokens:
            metrics.child(metrics.TENANT_TOKENS, tenant=label).inc(counted.tokens)
        if counted.usd:
            metrics.child(metrics.TENANT_COST_USD, tenant=label).inc(counted.usd)
        if label != "other":  # `other` holds several tenants: the sweep sums them
            metrics.child(metrics.TENANT_USAGE_TODAY, tenant=label, allowance="tokens").set(counted.tokens_today)
            metrics.child(metrics.TENANT_USAGE_TODAY, tenant=label, allowance="usd").set(counted.usd_today)

    def _gauge(self, tenant: str, settled: Settled) -> None:
        label = metrics.tenant_label(tenant)
        if label != "other":
            metrics.child(metrics.TENANT_RUNNING, tenant=label).set(settled.running)
            metrics.child(metrics.TENANT_QUEUED, tenant=label).set(settled.queued)
