"""`<prefix>.api.tenant.usage` (loopwire's addition, docs/protocol.md): what a tenant runs, waits
for and spent in the current UTC day, and its limits (LOOPWIRE_TENANT_LIMITS), read from
the tenant's keys (shared/stores/tenant_quotas.py). With tenants, a tenant asks on its own
subject `<prefix>.api.<tenant>.tenant.usage` and learns only its own; the tenant-less
subject is the operator's and names the tenant in the body."""

from __future__ import annotations

import time
from typing import Any

from loopwire.shared.contract.protocol import PROTOCOL_VERSION, TenantUsageRequest, error_reply
from loopwire.shared.contract.subjects import SESSION_ID_RE
from loopwire.shared.contract.tenant_limits import DEPLOYMENT, TenantLimits, utc_day
from loopwire.shared.stores.tenant_quotas import TenantQuotaStore


def tenant_named(req: TenantUsageRequest, limits: TenantLimits, subject_tenant: str | None) -> str | dict[str, Any]:
    """The tenant the request is about, or the error reply."""
    name = req.tenant
    if subject_tenant is not None:
        if name not in (None, subject_tenant):
            return error_reply("invalid_tenant", f"tenant {subject_tenant} may ask about itself only")
        return subject_tenant
    if not limits.tenants:
        if name not in (None, DEPLOYMENT):
            return error_reply("invalid_tenant", "without tenants (LOOPWIRE_TENANTS) the deployment is the one "
                                                 "tenant `*`")
        return DEPLOYMENT
    if name is None or not SESSION_ID_RE.match(name):
        return error_reply("invalid_request", "tenant: a tenant name (1-128 characters of [A-Za-z0-9_-]) is required")
    return name


async def tenant_usage(req: TenantUsageRequest, store: TenantQuotaStore, limits: TenantLimits | None,
                       *, subject_tenant: str | None, now_ns: int | None = None) -> dict[str, Any]:
    if limits is None:
        return error_reply("no_tenant_limits", "LOOPWIRE_TENANT_LIMITS is not set: no tenant is limited or counted")
    tenant = tenant_named(req, limits, subject_tenant)
    if isinstance(tenant, dict):
        return tenant
    day = utc_day(time.time_ns() if now_ns is None else now_ns)
    running, queued = await store.counts(tenant)
    tokens, usd = await store.today(tenant, day)
    return {"v": PROTOCOL_VERSION, "tenant": tenant, "day": day, "running": running, "queued": queued,
            "tokens_today": tokens, "usd_today": round(usd, 8), "limits": limits.for_tenant(tenant).public()}
