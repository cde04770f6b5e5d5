"""Work chains: the hops of a run kept in this process, held by one JetStream message.

Inside `loopwire up` every service runs in the same process, so a tool-turn's hops can be
calls instead of JetStream messages. Hops *into* the router already are calls inside the
handler that produced the result (a `call` route of dispatcher.py). Hops *out of* the
router (`memory.assemble`, `tools.execute`) cannot be calls inside the router: it holds a
session's lock while it decides, and a steer or an abort must get through during a
generation or a tool call. So the router, after its commit, starts them as tasks of a
*chain* (a `chain` route of dispatcher.py).

A chain is rooted at the JetStream work message whose handling started it. The root is
settled (acked) only when every task of its chain has ended: the root's own handler and
every hop handed off under it, transitively. While the chain outlives the root's handler a
timer sends `in_progress()` for the root, so JetStream does not redeliver it. In the
steady state of a run no work message goes on the wire at all; the root is the run's first
`memory.assemble` (ingress handlers publish their work: a redelivered `start` must never
start a second run).

A hop fails the way a JetStream message does, on its own: one that raises (an outage, a
fault) is handed to JetStream as its own work message (`Delivery.fallback`), after the
policy's pause, counting its attempt here as its first delivery (bus.ATTEMPTS_HEADER). From
there it is redelivered, and given up, exactly as in `loopwire serve`, with its own
delivery budget; the root and the rest of its chain settle as if the hop had been
published in the first place. Only when even that publish fails (NATS away) does the hop
nack its root.

Durability: a crash anywhere in the chain leaves the root unacked, so JetStream delivers it
again after ack_wait. That delivery is `redelivered` (the one notion of "this delivery may
repeat work" a handler sees, in every layout): its service answers from its step record
(every delivery claims its step first, shared/stores/step_store.py), and the result it
hands to the router asks for recovery. A result the session moved past is normally
ignored; a recovering one makes the router perform the session's current outbox again,
and that restarts the chain where the crash stopped it, under the same root. Work
already recorded is answered from its record; a tool whose result was never recorded
runs again with the same tool-use id. Only the root's own result recovers: hops started
later in a recovered chain are ordinary ones (no outbox is replayed twice).

Settling is the handler runner's (`run_handler`), never the handler's: a handler that
returns has done its work; one that raises is judged by the one redelivery policy
(shared/runtime/redelivery.py), the same for a JetStream message and a hop handed over here. The
root is acked when every delivery of its chain returned (or was handed to JetStream);
nacked with the policy's delay (growing with the root's delivery count) if its own
handler met an outage or a fault not yet given up; and given up (reported as a dead
letter, then terminated) if it raised `Undeliverable` or kept failing with a fault. While
any handler of the chain runs, the runner keeps the root alive with `in_progress()`
every ack_wait/3.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from enum import IntEnum
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from loopwire.shared.runtime.chain_balance import ChainBalance
from loopwire.shared.runtime.inflight import Heartbeat
from loopwire.shared.runtime.redelivery import (
    FAULT_DELAY_S,
    DeadLetter,
    RedeliveryPolicy,
    Undeliverable,
    is_outage,
    to_jetstream,
)

__all__ = ["CURRENT_DELIVERY", "Chain", "Delivery", "WorkHandler", "current_delivery", "decode", "hand_off", "log",
           "run_handler"]

log = logging.getLogger("loopwire.chain")

WorkHandler = Callable[["Delivery"], Awaitable[Any]]
ReportDeadLetter = Callable[[DeadLetter], Awaitable[None]]
Fallback = Callable[[], Awaitable[None]]
"""Publishes a handed-off hop as its own JetStream work message (counting one attempt)."""


M = TypeVar("M", bound=BaseModel)


class Outcome(IntEnum):
    """How a delivery settled, from the mildest to the gravest: a chain settles its root by
    the gravest outcome among its deliveries (a give-up outweighs a nack, which outweighs a
    fault, whose redelivery is sooner)."""

    ACK = 0
    FAULT = 1
    """A handler's bug: redelivered soon (FAULT_DELAY_S), given up after a few."""
    NACK = 2
    """An outage, or a handler's own nack: redelivered after the policy's delay."""
    GIVE_UP = 3
    """Undeliverable, rejected, or too many faults: a dead letter, then terminated."""


def decode(delivery: Delivery, model: type[M]) -> M:
    """The delivery's envelope: the model handed off as it is, else validated from the
    body (raises pydantic's ValidationError, also for a body that is not JSON).

    orjson parses and pydantic validates the objects: three times faster than pydantic's
    own JSON parser on an envelope of messages (17 against 54 µs for a 3.9 KB `Generate`)."""
    if isinstance(delivery.envelope, model):
        return delivery.envelope
    try:
        data = orjson.loads(delivery.body)
    except orjson.JSONDecodeError:
        return model.model_validate_json(delivery.body)  # raises the ValidationError that says why
    return model.model_validate(data)


class Chain:
    """The root message of a chain, the count of its deliveries not yet settled, and the
    worst outcome among those that were."""

    def __init__(self, root: Any, delivered: int, ack_wait_s: float, *, holds: bool,
                 policy: RedeliveryPolicy | None = None, report: ReportDeadLetter | None = None) -> None:
        self.root = root
        """The JetStream message (work_consumer.JetStreamRoot) the chain settles at its end."""
        self.delivered = delivered
        """The root's delivery count (with the attempts of bus.ATTEMPTS_HEADER): what the
        redelivery policy judges the root by."""
        self.holds = holds
        """Whether hops may be handed off under this root (not under ingress messages)."""
        self.ack_wait_s = ack_wait_s
        self.policy = policy or RedeliveryPolicy()
        self.report = report
        """Publishes a dead letter (shared/runtime/dead_letters.py); None: a message given up is
        only logged (the dead-letter consumer's own messages)."""
        self._open = 1  # the root's own handler
        self._outcome = Outcome.ACK
        self._delay: float | None = None
        self._failed: tuple[Delivery, str] | None = None
        self._heartbeat: Heartbeat | None = None
        self.hops = 0
        """Hops handed off under this root so far."""
        self.on_end: Callable[[], None] | None = None
        """Called once when the chain settles its root (the balance's count of chains)."""

    @property
    def open(self) -> int:
        return self._open

    @property
    def kept_alive(self) -> bool:
        """Whether the chain's own timer sends the root's heartbeats (hops are held)."""
        return self._heartbeat is not None

    def retain(self) -> None:
        self._open += 1
        if self._heartbeat is None:
            # From now on the chain may outlive the root's handler and its heartbeat.
            self._heartbeat = Heartbeat(self.root.in_progress, self.ack_wait_s).__enter__()

    async def release(self, delivery: Delivery, outcome: Outcome, delay: float | None = None,
                      *, reason: str = "") -> None:
        """One delivery of the chain settled with `outcome` (`delay`: a nack's own)."""
        self._outcome = max(self._outcome, outcome)
        if outcome is Outcome.NACK and delay is not None:
            self._delay = delay
        if outcome in (Outcome.FAULT, Outcome.GIVE_UP) and self._failed is None:
            self._failed = (delivery, reason)
        self._open -= 1
        if self._open > 0:
            return
        if self._heartbeat is not None:
            self._heartbeat.__exit__(None, None, None)
        if self.on_end is not None:
            self.on_end()
        await self._settle_root()

    async def _settle_root(self) -> None:
        outcome, policy = self._outcome, self.policy
        if outcome is Outcome.FAULT and policy.gives_up(self.delivered, fault=True):
            outcome = Outcome.GIVE_UP
        if outcome is Outcome.GIVE_UP:
            assert self._failed is not None
            delivery, reason = self._failed
            if await self._give_up(delivery, reason):
                await self.root.reject()
                return
            outcome = Outcome.NACK  # the dead letter could not be published (NATS away): later
        if outcome is Outcome.NACK:
            await self.root.nack(delay=self._delay if self._delay is not None else policy.delay(self.delivered))
        elif outcome is Outcome.FAULT:
            await self.root.nack(delay=FAULT_DELAY_S)
        else:
            await self.root.ack()

    async def _give_up(self, delivery: Delivery, reason: str) -> bool:
        letter = dead_letter_of(self, delivery, reason)
        log.error("giving up %s of session %s (run %s, step %s) after %d deliveries: %s", letter.subject,
                  letter.session_id, letter.run_id, letter.step_id, letter.deliveries, reason)
        if self.report is None:
            return True
        try:
            await self.report(letter)
        except Exception as exc:
            log.warning("the dead letter for %s could not be published (%s); redelivering it", letter.subject, exc)
            return False
        return True


def dead_letter_of(chain: Chain, delivery: Delivery, reason: str) -> DeadLetter:
    """What is known of a delivery given up: its root's place in JetStream, and the session,
    run and step of the failing envelope (the model handed off, the body, or the headers)."""
    raw = getattr(chain.root, "raw_message", None)
    meta = getattr(raw, "metadata", None)
    stream = consumer = ""
    seq = 0
    with contextlib.suppress(Exception):
        stream, consumer, seq = meta.stream, meta.consumer, int(meta.sequence.stream)  # type: ignore[union-attr]
    ids: dict[str, Any] = {}
    envelope = delivery.envelope
    if envelope is not None:
        ids = {k: getattr(envelope, k, None) for k in ("session_id", "run_id", "step_id")}
    elif delivery.body:
        with contextlib.suppress(Exception):
            body = orjson.loads(delivery.body)
            if isinstance(body, dict):
                ids = {k: body.get(k) for k in ("session_id", "run_id", "step_id")}
    headers = getattr(delivery.raw_message, "headers", None) or {}
    ids = {k: v if isinstance(v, str) else None for k, v in ids.items()}
    subject = delivery.subject or getattr(delivery.raw_message, "subject", "") or ""
    return DeadLetter(stream=stream, stream_seq=seq, consumer=consumer, subject=subject,
                      deliveries=chain.delivered,
                      session_id=ids.get("session_id") or headers.get("Loopwire-Session-Id"),
                      run_id=ids.get("run_id") or headers.get("Loopwire-Run-Id"),
                      step_id=ids.get("step_id"), reason=reason)


class Delivery:
    """One work envelope as its handler sees it, whether JetStream delivered it (the root
    of a chain) or the router handed it off in this process. The handler returns when its
    work is done and raises when it is not (`run_handler` settles it); `ack()`, `nack(delay)`
    and `reject()` settle it explicitly, exactly like a JetStream message."""

    __slots__ = ("body", "envelope", "redelivered", "raw_message", "subject", "fallback", "_chain", "_settled")

    def __init__(self, body: bytes, chain: Chain, *, redelivered: bool = False, raw_message: Any = None,
                 envelope: Any = None, subject: str = "", fallback: Fallback | None = None) -> None:
        self.body = body
        self.envelope = envelope
        """A hand-off's envelope as the validated model the router built (then `body` is
        empty): `decode` uses it as it is."""
        self.redelivered = redelivered
        """This delivery may repeat work done before (JetStream delivered the message
        before, or its publisher asked for recovery): a step result it produces asks the
        router to perform the session's current outbox again if the session moved past it.
        False for a hop handed off in process (a new hop)."""
        self.raw_message = raw_message
        """The nats-py message of a root (subject, headers, metadata); None for a hand-off."""
        self.subject = subject
        """The work subject of a hand-off (a root's is its raw message's)."""
        self.fallback = fallback
        """A hand-off's way onto JetStream when it fails here; None for a root."""
        self._chain = chain
        self._settled = False

    @property
    def chain(self) -> Chain:
        return self._chain

    @property
    def settled(self) -> bool:
        return self._settled

    async def ack(self) -> None:
        await self._settle(Outcome.ACK)

    async def nack(self, delay: float | None = None) -> None:
        if self.fallback is not None and not self._settled:  # a hop: onto JetStream on its own
            await self._settle(await _to_jetstream(self, Outcome.NACK, delay), delay)
            return
        await self._settle(Outcome.NACK, delay)

    async def reject(self) -> None:
        await self._settle(Outcome.GIVE_UP, reason="rejected by its handler")

    async def in_progress(self) -> None:
        await self._chain.root.in_progress()

    async def _settle(self, outcome: Outcome, delay: float | None = None, reason: str = "") -> None:
        if self._settled:
            return
        self._settled = True
        await self._chain.release(self, outcome, delay, reason=reason)


_current: ContextVar[Delivery | None] = ContextVar("loopwire_delivery", default=None)
CURRENT_DELIVERY = _current
"""The delivery this code runs under, read with `.get()` where a call into this module would
lengthen a hop's way between services (dispatcher.py); `current_delivery()` elsewhere."""


def current_delivery() -> Delivery | None:
    """The delivery whose handler this code runs under (tasks started by it inherit it)."""
    return _current.get()


async def run_handler(handler: WorkHandler, delivery: Delivery) -> None:
    """Run a work handler on a delivery (a consumer's JetStream message, the root of a
    chain, or a hop in its own task), keep the root alive while it runs, and settle the
    delivery by what the handler did: returned (ack), raised an outage (nack, growing
    delay), `Undeliverable` (give up), anything else (a fault: retried a few times, then
    given up). A delivery the handler settled itself keeps that outcome."""
    token = _current.set(delivery)
    outcome, reason = Outcome.ACK, ""
    try:
        # A hop of a chain that is already kept alive needs no beat of its own.
        beat = None if delivery.chain.kept_alive else delivery.in_progress
        with Heartbeat(beat, delivery.chain.ack_wait_s):
            await handler(delivery)
    except Undeliverable as exc:
        outcome, reason = Outcome.GIVE_UP, f"malformed: {exc}"
        log.error("work handler %s cannot handle its message: %s", _name(handler), exc)
    except Exception as exc:
        if is_outage(exc):
            outcome = Outcome.NACK
            log.warning("work handler %s met an outage (%s: %s); it will be redelivered later",
                        _name(handler), type(exc).__name__, exc)
        else:
            outcome, reason = Outcome.FAULT, f"fault: {type(exc).__name__}: {exc}"
            log.exception("work handler %s failed; it will be redelivered or given up", _name(handler))
    finally:
        _current.reset(token)
    if not delivery.settled and outcome in (Outcome.NACK, Outcome.FAULT) and delivery.fallback is not None:
        outcome = await _to_jetstream(delivery, outcome)
    if not delivery.settled:
        await delivery._settle(outcome, reason=reason)


async def _to_jetstream(delivery: Delivery, outcome: Outcome, delay: float | None = None) -> Outcome:
    """A hand-off that failed here goes on as its own JetStream message, after the pause
    its second delivery would have had (`delay`, else redelivery.pause_before_jetstream): ACK
    (for its chain) once published, else `outcome` (NATS away: the root is nacked and the
    chain recovered from it)."""
    assert delivery.fallback is not None
    try:
        await to_jetstream(delivery.fallback, outage=outcome is not Outcome.FAULT, policy=delivery.chain.policy, delay=delay)
    except Exception as exc:
        log.warning("hop %s failed and could not be published on its own (%s); its chain's root will be "
                    "redelivered", delivery.subject, exc)
        return outcome
    log.info("hop %s failed in process; published as its own work message", delivery.subject)
    return Outcome.ACK


def _name(handler: WorkHandler) -> str:
    return str(getattr(handler, "__qualname__", handler))


def hand_off(handler: WorkHandler, envelope: Any, tasks: set[asyncio.Task[None]], *, max_hops: int = 0,
             balance: ChainBalance | None = None, subject: str = "", fallback: Fallback | None = None) -> bool:
    """Start `handler` on `envelope` (a validated model, or JSON bytes) as a task of the
    current chain. False when this code runs under no chain that holds hops (an ingress
    handler, a test), when the chain has had `max_hops` (when > 0), or when `balance` says
    this process holds more than its share of chains: publish instead. `fallback`
    publishes the hop as its own message if it fails here."""
    parent = _current.get()
    if parent is None or not parent.chain.holds or parent.settled:
        # A settled parent: code its handler left running (a background task inherits
        # the context); its chain may have settled its root already.
        return False
    chain = parent.chain
    if max_hops and chain.hops >= max_hops:
        return False
    if balance is not None and balance.should_shed():
        return False
    if chain.hops == 0 and balance is not None:
        balance.opened()
        chain.on_end = balance.closed
    chain.hops += 1
    as_bytes = isinstance(envelope, bytes)
    delivery = Delivery(envelope if as_bytes else b"", chain, envelope=None if as_bytes else envelope,
                        subject=subject, fallback=fallback)
    chain.retain()
    task = asyncio.get_running_loop().create_task(run_handler(handler, delivery))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return True
