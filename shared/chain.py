"""Work chains: the hops of a run kept in this process, held by one JetStream message.

Inside `loopwire up` every service runs in the same process, so a tool-turn's hops can be
calls instead of JetStream messages. Hops *into* the router already are calls inside the
handler that produced the result (`ServiceContext.deliver_result`). Hops *out of* the
router (`memory.assemble`, `tools.execute`) cannot be calls inside the router: it holds a
session's lock while it decides, and a steer or an abort must get through during a
generation or a tool call. So the router, after its commit, starts them as tasks of a
*chain* (`ServiceContext.hand_off`).

A chain is rooted at the JetStream work message whose handling started it. The root is
settled (acked) only when every task of its chain has ended: the root's own handler and
every hop handed off under it, transitively. While the chain outlives the root's handler a
timer sends `in_progress()` for the root, so JetStream does not redeliver it. In the
steady state of a run no work message goes on the wire at all; the root is the run's first
`memory.assemble` (ingress handlers publish their work: a redelivered `start` must never
start a second run).

Durability: a crash anywhere in the chain leaves the root unacked, so JetStream delivers it
again after ack_wait. Its service answers from its step record, and hands the result to
the router marked *recover* (the root was delivered before). A result the session moved
past is normally ignored; marked recover, the router performs the session's current outbox
again (`replay`), and that restarts the chain where the crash stopped it, under the same
root. Work already recorded is answered from its record; a tool whose result was never
recorded runs again with the same tool-use id. Only the root's own result recovers: hops
started later in a recovered chain are ordinary ones (no outbox is replayed twice).

Settling: a hop's handler acks, nacks or rejects its `Delivery` as it would a JetStream
message. The root is nacked (redelivered after NACK_DELAY_S, and recovered) if any
handler of the chain nacked (or raised), else rejected if one rejected its delivery (a
body that can never decode), else acked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import BaseModel

from .chain_balance import ChainBalance
from .inflight import Heartbeat

log = logging.getLogger("loopwire.chain")

NACK_DELAY_S = 1.0

WorkHandler = Callable[["Delivery"], Awaitable[Any]]


M = TypeVar("M", bound=BaseModel)


def decode(delivery: Delivery, model: type[M]) -> M:
    """The delivery's envelope: the model handed off as it is, else validated from the
    body (raises pydantic's ValidationError, also for a body that is not JSON)."""
    if isinstance(delivery.envelope, model):
        return delivery.envelope
    return model.model_validate_json(delivery.body)


class Chain:
    """The root message of a chain and the count of its hops not yet settled."""

    def __init__(self, root: Any, delivered: int, ack_wait_s: float, holds: bool) -> None:
        self.root = root
        """The JetStream message (FastStream's NatsMessage) the chain settles at its end."""
        self.delivered = delivered
        """The root's delivery count: a replayed hop of a recovered chain inherits it (the
        llm retracts a partial answer streamed by an earlier attempt when it is > 1)."""
        self.holds = holds
        """Whether hops may be handed off under this root (not under ingress messages)."""
        self._ack_wait_s = ack_wait_s
        self._open = 1  # the root's own handler
        self._outcome = "ack"
        self._delay = NACK_DELAY_S
        self._heartbeat: Heartbeat | None = None
        self.hops = 0
        """Hops handed off under this root so far."""
        self.on_end: Callable[[], None] | None = None
        """Called once when the chain settles its root (the balance's count of chains)."""

    @property
    def open(self) -> int:
        return self._open

    def retain(self) -> None:
        self._open += 1
        if self._heartbeat is None:
            # From now on the chain may outlive the root's handler and its heartbeat.
            self._heartbeat = Heartbeat(self.root.in_progress, self._ack_wait_s).__enter__()

    async def release(self, outcome: str, delay: float | None = None) -> None:
        if outcome == "nack":
            self._outcome = "nack"
            self._delay = delay if delay is not None else self._delay
        elif outcome == "reject" and self._outcome == "ack":
            self._outcome = "reject"
        self._open -= 1
        if self._open > 0:
            return
        if self._heartbeat is not None:
            self._heartbeat.__exit__(None, None, None)
        if self.on_end is not None:
            self.on_end()
        if self._outcome == "nack":
            await self.root.nack(delay=self._delay)
        elif self._outcome == "reject":
            await self.root.reject()
        else:
            await self.root.ack()


class Delivery:
    """One work envelope as its handler sees it, whether JetStream delivered it (the root
    of a chain) or the router handed it off in this process. Settle it exactly like a
    JetStream message: `ack()`, `nack(delay)` or `reject()`; `in_progress()` keeps the
    chain's root alive."""

    __slots__ = ("body", "envelope", "seen", "delivered", "recover", "raw_message", "_chain", "_settled")

    def __init__(self, body: bytes, chain: Chain, *, seen: bool, delivered: int, recover: bool = False,
                 raw_message: Any = None, envelope: Any = None) -> None:
        self.body = body
        self.envelope = envelope
        """A hand-off's envelope as the validated model the router built (then `body` is
        empty): `decode` uses it as it is."""
        self.seen = seen
        """The step may have been handled before (runtime.seen_before): look for its record."""
        self.delivered = delivered
        self.recover = recover
        """A redelivered root: a result the session moved past replays its current outbox."""
        self.raw_message = raw_message
        """The nats-py message of a root (subject, headers, metadata); None for a hand-off."""
        self._chain = chain
        self._settled = False

    @property
    def chain(self) -> Chain:
        return self._chain

    @property
    def settled(self) -> bool:
        return self._settled

    async def ack(self) -> None:
        await self._settle("ack")

    async def nack(self, delay: float | None = None) -> None:
        await self._settle("nack", delay)

    async def reject(self) -> None:
        await self._settle("reject")

    async def in_progress(self) -> None:
        await self._chain.root.in_progress()

    async def _settle(self, outcome: str, delay: float | None = None) -> None:
        if self._settled:
            return
        self._settled = True
        await self._chain.release(outcome, delay)


_current: ContextVar[Delivery | None] = ContextVar("loopwire_delivery", default=None)


def current_delivery() -> Delivery | None:
    """The delivery whose handler this code runs under (tasks started by it inherit it)."""
    return _current.get()


async def run_handler(handler: WorkHandler, delivery: Delivery) -> None:
    """Run a work handler on a delivery: a consumer's JetStream message (the root of a
    chain), or a hop in its own task. One the handler left unsettled is nacked."""
    token = _current.set(delivery)
    try:
        await handler(delivery)
    except Exception:
        log.exception("work handler %s failed; its chain's root will be redelivered",
                      getattr(handler, "__qualname__", handler))
    finally:
        _current.reset(token)
        if not delivery.settled:
            await delivery.nack()


def hand_off(handler: WorkHandler, envelope: Any, replay: bool, tasks: set[asyncio.Task[None]],
             max_hops: int = 0, balance: ChainBalance | None = None) -> bool:
    """Start `handler` on `envelope` (a validated model, or JSON bytes) as a task of the
    current chain. False when this code runs under no chain that holds hops (an ingress
    handler, a test), when the chain has had `max_hops` (when > 0), or when `balance` says
    this process holds more than its share of chains: publish instead."""
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
    delivery = Delivery(envelope if as_bytes else b"", chain, seen=replay,
                        delivered=chain.delivered if replay else 1, envelope=None if as_bytes else envelope)
    chain.retain()
    task = asyncio.get_running_loop().create_task(run_handler(handler, delivery))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return True
