"""Tenant limits (`LOOPWIRE_TENANT_LIMITS`, docs/protocol.md "Tenant limits"): what the
operator lets each tenant occupy and spend, and whose limits a session is held to.

The operator's JSON object maps a tenant (or `*`) to its limits; `*` is the default for
tenants not named and, without tenants (LOOPWIRE_TENANTS off), the limit of the whole
deployment, which then counts as the one tenant `*`. A request never names a limit:
nothing a client sends can raise one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from loopwire.shared.contract.subjects import SESSION_ID_RE, tenant_of

DEPLOYMENT = "*"
"""The `*` entry, and the tenant every session counts under without tenants."""


def utc_day(now_ns: int) -> str:
    """The UTC day (`YYYY-MM-DD`) a usage counts in: its allowance's period."""
    return datetime.fromtimestamp(now_ns / 1e9, UTC).strftime("%Y-%m-%d")


class TenantLimit(BaseModel):
    """One tenant's limits; an omitted limit is no limit."""

    # A misspelt limit (`max_runing`) stops the services at start-up instead of meaning "none".
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_running: int | None = Field(default=None, ge=0)
    """Runs of the tenant in progress at once, counted across every router replica; a start
    beyond it waits in the tenant's queue (status `queued`, event `run.queued`)."""
    max_queued: int | None = Field(default=None, ge=0)
    """Starts that may wait for a slot; one beyond it is refused (`quota_exceeded`)."""
    tokens_per_day: int | None = Field(default=None, ge=0)
    """Tokens (input, cache reads and writes included, plus output) per UTC day."""
    usd_per_day: float | None = Field(default=None, ge=0)
    """Cost in USD per UTC day, at the router's prices (a model without a price counts
    its tokens only)."""

    @property
    def has_allowance(self) -> bool:
        return self.tokens_per_day is not None or self.usd_per_day is not None

    def public(self) -> dict[str, int | float]:
        """The limits that are set, as the usage query reports them."""
        return self.model_dump(exclude_none=True)


class TenantLimits(BaseModel):
    """The operator's table: a tenant's own entry, else `*`, else no limits."""

    model_config = ConfigDict(frozen=True)

    entries: dict[str, TenantLimit] = Field(default_factory=dict)
    tenants: bool = False
    """LOOPWIRE_TENANTS: sessions count under their tenant; off, all under `*`."""

    @classmethod
    def parse(cls, entries: dict[str, TenantLimit], tenants: bool) -> TenantLimits:
        for name in entries:
            if name != DEPLOYMENT and not SESSION_ID_RE.match(name):
                raise ValueError(f"LOOPWIRE_TENANT_LIMITS: {name!r} is neither `*` nor a tenant name "
                                 "(1-128 characters of [A-Za-z0-9_-])")
        return cls(entries=entries, tenants=tenants)

    def tenant_of(self, sid: str) -> str:
        """The tenant whose limits session `sid` counts against."""
        return (tenant_of(sid) or DEPLOYMENT) if self.tenants else DEPLOYMENT

    def for_tenant(self, tenant: str) -> TenantLimit:
        if self.tenants and tenant in self.entries:
            return self.entries[tenant]
        return self.entries.get(DEPLOYMENT) or TenantLimit()

    def for_session(self, sid: str) -> TenantLimit:
        return self.for_tenant(self.tenant_of(sid))

    @property
    def named(self) -> list[str]:
        """The tenants the table names, in its order (`*` included)."""
        return list(self.entries)
