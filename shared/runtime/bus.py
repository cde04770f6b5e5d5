"""Publishing side of the services: work envelopes, events and ingress, over raw nats-py.

Consuming work is nats-py's too (shared/runtime/work_consumer.py); publishing goes through
the connection FastStream opened, because FastStream's publisher costs about 3x the CPU of
nats-py's for the same request (measured on a 4 KB round trip: ~220 µs against ~75 µs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import BaseModel

from loopwire.shared.contract import codec, message_ids
from loopwire.shared.contract.events import AnyEvent, EventFields
from loopwire.shared.contract.headers import RUN_HEADER, SESSION_HEADER
from loopwire.shared.contract.protocol import EPHEMERAL_KINDS, make_event
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.pub_acks import PubAcks
from loopwire.shared.stores.event_log import Append, EventLogStore
from loopwire.shared.stores.stream_leader import ATTEMPT_S, ask_leader

log = logging.getLogger("loopwire.bus")

ATTEMPTS_HEADER = "Loopwire-Attempts"
"""On a work message published for a hop that failed in process (shared/runtime/chain.py):
the attempts it had there, counted as deliveries of the message, so its budget is the
hop's own and the same as on the JetStream path."""
Published = tuple[str, bytes, dict[str, str]]
"""(subject, data, headers) of a JetStream publish."""
EventItem = tuple[str | None, str, str | None, EventFields]
"""(run_id, kind, key, fields) of an event to emit."""
RECOVER_HEADER = "Loopwire-Recover"
"""On a `router.result` produced by a redelivered chain root (shared/runtime/chain.py): if the
session moved past it, the router performs its current outbox again."""


class Bus:
    def __init__(self, nc: NatsClient, subjects: Subjects, events: EventLogStore, *,
                 jetstream_timeout_s: float = 5.0) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=jetstream_timeout_s)
        self.acks = PubAcks(nc, timeout_s=min(ATTEMPT_S, jetstream_timeout_s))
        """The events' and the work's JetStream publishes and their PubAcks (pub_acks.py),
        each failing with a timeout after an attempt's time (stream_leader.py)."""
        self.timeout_s = jetstream_timeout_s
        self.subjects = subjects
        self.events = events

    async def publish_work(self, subject: str, envelope: BaseModel | dict[str, Any], msg_id: str,
                           *, recover: bool = False, attempts: int = 0) -> None:
        """Durable publish into LOOPWIRE_WORK; `msg_id` dedups a re-publish after a crash
        (within the stream's duplicate window; beyond it, the consumer's claim of the step
        finds its record). `attempts`: the hop already had that many in process (it
        failed there), counted as deliveries (ATTEMPTS_HEADER).

        The headers name the session and run (for the consumer's log lines) and carry the
        envelope's trace context, so the consumer's spans join the run's trace."""
        headers = work_headers(envelope, msg_id, recover=recover, attempts=attempts)
        data = codec.dumps(envelope)
        # Sent again while the stream elects a leader (shared/stores/stream_leader.py).
        await ask_leader(lambda: self._stored(subject, data, headers), total_s=self.timeout_s, timed=True)

    async def _stored(self, subject: str, data: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """One JetStream publish and its PubAck (pub_acks.py), as `JetStreamContext.publish`
        for less of the CPU; its PubAck times out after an attempt's time (pub_acks.py), and
        `ask_leader` sends it again."""
        return await (await self.acks.publish(subject, data, headers))

    async def emit(self, session_id: str, run_id: str | None, kind: str, *, key: str | None,
                   fields: EventFields) -> AnyEvent:
        """Assign a seq, store, and publish one event on `<prefix>.out.<sid>.<kind>`.

        With `key` set the event is emitted at most once per key: a re-emission after a
        crash publishes the original again (JetStream drops it as a duplicate by
        Nats-Msg-Id) and the transcript keeps one copy."""
        return (await self.emit_many(session_id, [(run_id, kind, key, fields)]))[0]

    async def emit_many(self, session_id: str, events: list[EventItem]) -> list[AnyEvent]:
        """Each (run_id, kind, key, fields), in order: their seqs assigned and stored in one
        Redis call, then published (publish_stored)."""
        in_flight = await self.send_many(session_id, events)
        await in_flight.settle()
        return in_flight.events

    async def send_many(self, session_id: str, events: list[EventItem]) -> InFlight:
        """`emit_many` up to the PubAcks: the events stored (one Redis call) and written to
        the connection, their PubAcks still to come (`InFlight.settle`)."""
        items = event_items(session_id, events)
        if len(items) == 1:  # one event: the store's `append`; several: one `append_many`
            body, key, store = items[0]
            stored = [await self.events.append(session_id, body, key, store=store)]
        elif items:
            stored = await self.events.append_many(session_id, items)
        else:
            stored = []
        return await self.send_stored(session_id, stored)

    async def publish_stored(self, session_id: str, stored: list[tuple[AnyEvent, bool]]) -> None:
        """Publish events that already have their seq (stored by `append_many`, or with a
        router commit), one after the other on this connection (which keeps their order),
        their PubAcks awaited together. A re-publish of a stored event is dropped by
        JetStream as a duplicate (Nats-Msg-Id `<sid>:<seq>`)."""
        await (await self.send_stored(session_id, stored)).settle()

    async def send_stored(self, session_id: str, stored: list[tuple[AnyEvent, bool]]) -> InFlight:
        """`publish_stored` up to the PubAcks: each event written to this connection in
        order, the PubAcks still to come (`InFlight.settle`)."""
        acks: list[tuple[Published, asyncio.Future[Any]]] = []
        try:
            for event, _new in stored:
                subject = self.subjects.event(session_id, event["kind"])
                data = codec.dumps(event)
                if event["kind"] in EPHEMERAL_KINDS:  # no PubAck to wait for: a signal of the moment
                    await self.nc.publish(subject, data)
                else:
                    headers = {"Nats-Msg-Id": message_ids.event_msg_id(session_id, event["seq"])}
                    acks.append(((subject, data, headers), await self.acks.publish(subject, data, headers)))
        except BaseException:
            _cancel(acks)
            raise
        return InFlight(self, [event for event, _ in stored], acks)

    async def _publish_all(self, items: list[Published]) -> None:
        """Publish each in order on this connection, their PubAcks awaited together."""
        acks: list[tuple[Published, asyncio.Future[Any]]] = []
        try:
            for subject, data, headers in items:
                acks.append(((subject, data, headers), await self.acks.publish(subject, data, headers)))
        except BaseException:
            _cancel(acks)
            raise
        await self._settle(acks)

    async def _settle(self, acks: list[tuple[Published, asyncio.Future[Any]]]) -> None:
        try:
            for _, ack in acks:
                # Futures, awaited in turn: gather would add a gathering future and a
                # callback per PubAck to every hop's events for the same outcome (the
                # first failure raised, the rest cancelled below).
                await ack
        finally:
            _cancel(acks)


class InFlight:
    """Events written to the connection whose PubAcks are still to come (`Bus.send_stored`)."""

    def __init__(self, bus: Bus, events: list[AnyEvent],
                 acks: list[tuple[Published, asyncio.Future[Any]]]) -> None:
        self.bus = bus
        self.events = events
        """The events, each with its seq, in their order."""
        self._acks = acks

    async def settle(self) -> None:
        """Await the PubAcks; while the stream elects a leader, every event is sent again in
        order (a repeat of one it stored is dropped as a duplicate)."""
        acks, self._acks = self._acks, []
        if acks:
            bus = self.bus
            await ask_leader(lambda: bus._settle(acks), again=lambda: bus._publish_all([item for item, _ in acks]),
                             total_s=bus.timeout_s, timed=True)

    def cancel(self) -> None:
        """Give the PubAcks up (the caller is failing): their slots in nats-py are freed."""
        _cancel(self._acks)
        self._acks = []


def _cancel(acks: list[tuple[Published, asyncio.Future[Any]]]) -> None:
    for _, ack in acks:
        if not ack.done():
            ack.cancel()  # leaves the PubAcks awaited (pub_acks.py)
        elif not ack.cancelled():
            ack.exception()  # looked at: an error nobody is left to await is not logged as lost


def work_headers(envelope: BaseModel | dict[str, Any], msg_id: str, *, recover: bool = False,
                 attempts: int = 0) -> dict[str, str]:
    """The headers of a work message (or of a direct result, shared/runtime/direct_results.py)."""
    get = envelope.get if isinstance(envelope, dict) else lambda k, d=None: getattr(envelope, k, d)
    headers = {"Nats-Msg-Id": msg_id}
    sid, run_id, trace = get("session_id"), get("run_id"), get("trace") or {}
    if sid:
        headers[SESSION_HEADER] = sid
    if run_id:
        headers[RUN_HEADER] = run_id
    if attempts:
        headers[ATTEMPTS_HEADER] = str(attempts)
    if recover:
        headers[RECOVER_HEADER] = "1"
    headers.update(trace or HOOKS.trace_headers())
    return headers


def event_items(session_id: str, events: Sequence[EventItem]) -> list[Append]:
    """(run_id, kind, key, fields) -> what the event log appends: (body, key, store);
    ephemeral kinds (`text.delta`, progress) take a seq but are not stored."""
    return [(make_event(kind, session_id, run_id, seq=0, **fields), key, kind not in EPHEMERAL_KINDS)
            for run_id, kind, key, fields in events]
