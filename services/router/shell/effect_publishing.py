"""Performing a decision's effects, in their order, after its commit.

Events go out in batches (consecutive events in one Redis call, before what follows
them); the leading events of a transition may have been stored by its commit already
(`leading_events`: the commit-with-events capability), and are then only published.
Notices are core NATS, best effort. Work goes through the dispatcher (shared/runtime/dispatcher.py):
a task of the same chain when its service runs in this process, else a JetStream message with
its Nats-Msg-Id. Every
effect is idempotent, so performing a stored outbox again is safe.
"""

from __future__ import annotations

from loopwire.shared.contract import codec
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.runtime.bus import EventItem, InFlight, event_items
from loopwire.shared.runtime.service_context import ServiceContext

from ..core.effects import CountTenantUsage, Effect, EmitEvent, PublishNotice, PublishWork, TenantSlot
from ..core.settings import RouterSettings
from .quota_keeper import Admission, QuotaKeeper


def leading_events(effects: list[Effect]) -> list[EventItem]:
    """(run_id, kind, key, fields) of the events before the first effect of another kind."""
    lead: list[EventItem] = []
    for effect in effects:
        if not isinstance(effect, EmitEvent):
            break
        lead.append((effect.run_id, effect.kind, effect.key, effect.fields))
    return lead


class EffectPublisher:
    def __init__(self, ctx: ServiceContext[RouterSettings], quotas: QuotaKeeper | None = None) -> None:
        self.ctx = ctx
        self.quotas = quotas

    async def perform(self, sid: str, effects: list[Effect],
                      stored: list[tuple[AnyEvent, bool]] | None = None, *,
                      new_events: bool = False) -> list[Admission]:
        """`stored`: the leading events, already stored with the commit: only published.
        `new_events`: of the events, only those not stored before are published (another
        replica publishes the rest). Work performed again (a stored outbox) needs no mark:
        its consumers claim every step before doing it, and find its record if it was
        done. Returns the tenants' answers for waiting runs that settling slots gave
        (quota_keeper.py)."""
        bus = self.ctx.bus
        subjects = self.ctx.subjects
        batch: list[EventItem] = []
        admissions: list[Admission] = []
        if self.quotas is not None:
            # Settled first: a client that reads the tenant's usage, or starts again, once it
            # sees `run.ended` finds the run counted and its slot free.
            for effect in effects:
                if isinstance(effect, TenantSlot):
                    admissions += await self.quotas.settle(sid, effect)
                elif isinstance(effect, CountTenantUsage):
                    await self.quotas.count(sid, effect)
        in_flight: InFlight | None = None
        if stored:
            in_flight = await bus.send_stored(sid, stored)
            effects = effects[len(stored):]
        try:
            for n, effect in enumerate(effects):
                # Work goes out while the PubAcks of the events before it are in flight: one
                # JetStream round trip per hop instead of two (docs/architecture.md, "A hop's
                # events and its work"); anything else waits for them.
                if in_flight is not None and not isinstance(effect, PublishWork):
                    await in_flight.settle()
                    in_flight = None
                if isinstance(effect, EmitEvent):
                    # Consecutive events go out together (one Redis call), before what follows them.
                    batch.append((effect.run_id, effect.kind, effect.key, effect.fields))
                    if n + 1 == len(effects) or not isinstance(effects[n + 1], EmitEvent):
                        in_flight = await (self._send_new(sid, batch) if new_events else bus.send_many(sid, batch))
                        batch = []
                elif isinstance(effect, PublishNotice):
                    # Core NATS, best effort: a lost notice only means the abandoned work runs
                    # to its end and its (stale) result is ignored.
                    subject = subjects.permission(sid) if effect.notice == "permission" else subjects.cancel(sid)
                    await bus.nc.publish(subject, codec.dumps(effect.body))
                elif isinstance(effect, PublishWork):
                    # A task of this chain when its service runs here (after the commit,
                    # outside the session's lock), else a JetStream message (dispatcher.py).
                    await self.ctx.dispatch.send(effect.work, msg_id=effect.msg_id, stored=effect.envelope)
                # TenantSlot, CountTenantUsage: settled above (or the limits were switched off
                # since the outbox was stored)
            if in_flight is not None:
                await in_flight.settle()
        except BaseException:
            if in_flight is not None:
                in_flight.cancel()
            raise
        return admissions

    async def _send_new(self, sid: str, events: list[EventItem]) -> InFlight:
        stored = await self.ctx.events.append_many(sid, event_items(sid, events))
        return await self.ctx.bus.send_stored(sid, [(event, new) for event, new in stored if new])

    async def new_events_only(self, sid: str, effects: list[Effect]) -> None:
        """Events of a decision that commits nothing, stored if they are not yet, but
        published only then: a refusal read from the stream (a session with no state
        refuses the same way every time, and the replica it was delivered to publishes it
        too), the events of a tool step's result the run moved past (those of the calls
        reported as they finished went out then)."""
        events: list[EventItem] = [(e.run_id, e.kind, e.key, e.fields) for e in effects if isinstance(e, EmitEvent)]
        if events:
            stored = await self.ctx.events.append_many(sid, event_items(sid, events))
            await self.ctx.bus.publish_stored(sid, [(event, new) for event, new in stored if new])
