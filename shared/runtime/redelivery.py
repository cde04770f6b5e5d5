"""The one redelivery policy of every work handler: when to ack, nack (and how long to
wait), or give a message up as undeliverable.

A handler returns (its work is done: ack) or raises. What it raised decides the rest:

- an **outage** (`is_outage`: Redis or NATS unreachable, a timeout talking to them, a
  commit that kept losing to other replicas): the message is nacked with a delay that grows
  with its delivery count (`RedeliveryPolicy.delay`), so its `max_deliver` deliveries span
  LOOPWIRE_OUTAGE_TOLERANCE_S instead of burning one a second against a dead Redis;
- `Undeliverable` (a body that can never decode): given up at once;
- anything else is a **fault** (a bug, a poison input in the session's own history): a
  fault repeats on every delivery, so after `fault_max_deliver` deliveries the message is
  given up instead of retried for the whole tolerance.

A message given up is reported as a `DeadLetter` (shared/runtime/dead_letters.py) and terminated;
the router ends its run `failed` with an `error` event `undeliverable`. A message that
JetStream itself gives up (max deliveries reached: a process that kept dying, NATS
unreachable for every attempt) arrives there through the server's advisory instead.
Which service handled it, and whether it came from JetStream or was handed over in this
process (shared/runtime/chain.py), changes none of this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats import errors as nats_errors
from nats.js import errors as js_errors
from pydantic import BaseModel
from redis import exceptions as redis_errors

from loopwire.shared.stores.step_store import StepHeld

__all__ = ["CommitContention", "DeadLetter", "FAULT_DELAY_S", "RedeliveryPolicy", "Undeliverable", "is_outage",
           "pause_before_jetstream", "to_jetstream"]

FAULT_DELAY_S = 1.0
"""Pause before the next delivery after a fault (few, quick attempts)."""
FIRST_DELAY_S = 1.0
"""Pause before the second delivery after an outage; it doubles up to the policy's cap."""


class Undeliverable(Exception):
    """Raised by a handler for a message no delivery can ever handle (a malformed body):
    it is given up at once."""


class CommitContention(Exception):
    """A session's commit kept losing to other replicas: transient, retried as an outage."""


_OUTAGE_TYPES: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,   # includes BusyLoadingError (a Redis still loading its data)
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,     # a replica promoted late, a failover under way
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
    nats_errors.ConnectionClosedError,
    nats_errors.ConnectionDrainingError,
    nats_errors.ConnectionReconnectingError,
    nats_errors.NoServersError,
    nats_errors.OutboundBufferLimitError,
    nats_errors.StaleConnectionError,
    nats_errors.TimeoutError,
    nats_errors.NoRespondersError,  # a JetStream publish while the stream's server is away
    js_errors.ServiceUnavailableError,
    js_errors.NoStreamResponseError,
    asyncio.TimeoutError,
    ConnectionError,
    CommitContention,
    StepHeld,  # another live worker runs the step: later it is recorded, or its claim expired
)


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says a server was unreachable, not that the work
    itself is wrong: then waiting helps, and the message is kept for the whole tolerance."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, _OUTAGE_TYPES):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


@dataclass(frozen=True)
class RedeliveryPolicy:
    tolerance_s: float = 300.0
    max_deliver: int = 20
    fault_max_deliver: int = 3

    def delay(self, delivered: int) -> float:
        """Seconds to wait before delivery `delivered + 1`, after an outage ended delivery
        `delivered`: 1 s doubling, capped so that the nacks of all `max_deliver` deliveries
        add up to a little more than the tolerance (with very few deliveries the first
        delay is longer than 1 s, so that they still span it)."""
        first, cap = _schedule(self.tolerance_s, self.max_deliver)
        return min(cap, first * 2 ** min(max(1, delivered) - 1, 30))

    def span_s(self) -> float:
        """How long the nacks of every delivery add up to (at least the tolerance)."""
        return sum(self.delay(n) for n in range(1, max(2, self.max_deliver)))

    def gives_up(self, delivered: int, fault: bool) -> bool:
        """After a fault on delivery `delivered`: whether to give the message up now.
        Outages are left to JetStream's max_deliver (and its advisory)."""
        return fault and self.fault_max_deliver > 0 and delivered >= self.fault_max_deliver


_SCHEDULES: dict[tuple[float, int], tuple[float, float]] = {}


def pause_before_jetstream(outage: bool, policy: RedeliveryPolicy) -> float:
    """How long work that failed in process waits before it goes on as its own message: the
    pause its second delivery would have had (the policy's first delay after an outage,
    FAULT_DELAY_S after a fault)."""
    return policy.delay(1) if outage else FAULT_DELAY_S


async def to_jetstream(publish: Callable[[], Awaitable[None]], *, outage: bool, policy: RedeliveryPolicy,
                       delay: float | None = None) -> None:
    """Work that failed in process, onto JetStream after its pause (`delay` when the handler
    chose one). Raises when the publish fails (NATS away)."""
    await asyncio.sleep(delay if delay is not None else pause_before_jetstream(outage, policy))
    await publish()


def _schedule(tolerance_s: float, max_deliver: int) -> tuple[float, float]:
    """(first delay, cap) of the backoff for a tolerance and a number of deliveries."""
    key = (tolerance_s, max_deliver)
    found = _SCHEDULES.get(key)
    if found is not None:
        return found
    naks = min(max(1, max_deliver - 1), 30)
    target = tolerance_s * 1.1  # delivery and handling time are not counted: some margin

    def span(first: float, cap: float) -> float:
        return sum(min(cap, first * 2 ** k) for k in range(naks))

    first = FIRST_DELAY_S
    if span(first, float("inf")) < target:  # too few deliveries to reach it from 1 s
        first = target / (2 ** naks - 1)
        found = (first, first * 2 ** (naks - 1))
    else:
        lo, hi = first, max(first, target)
        if span(first, lo) < target:
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if span(first, mid) >= target else (mid, hi)
            lo = hi
        found = (first, lo)
    _SCHEDULES[key] = found
    return found


class DeadLetter(BaseModel):
    """Work given up: published by the handler wrapper on `<prefix>.deadletter` (a fault,
    an undeliverable body), or read back by the router from a max-deliveries advisory."""

    v: int = 1
    stream: str = ""
    """The stream of the message given up (empty for a hop handed over in process)."""
    stream_seq: int = 0
    consumer: str = ""
    subject: str = ""
    """The work (or ingress) subject of the message."""
    deliveries: int = 0
    session_id: str | None = None
    run_id: str | None = None
    step_id: str | None = None
    reason: str = ""
    """Why: `max_deliveries` (JetStream gave up), `fault: <error>` or `malformed: <error>`."""
