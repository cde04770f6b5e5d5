"""Requests that a JetStream stream's leader answers, asked again while it is elected.

On a NATS cluster each stream (and each consumer) has a leader, which alone stores a
publish and answers a stream read (`STREAM.MSG.GET`) or a consumer's info. When the node
holding it is lost, the others elect a new one, which takes a few seconds (about 4 to 6
on loopback, tests/e2e/test_nats_cluster.py); meanwhile a request either gets "no
responders" at once or no answer at all, and is not stored or answered. So a request
that has to reach the leader is sent again, with the same Nats-Msg-Id for a publish
(a repeat of one that was stored is a duplicate JetStream drops), after a short pause or
after PUBLISH_ATTEMPT_S without an answer, until the JetStream timeout: a run resumes
about as soon as the new leader is there instead of after the whole timeout and a
redelivery's back-off. Past the timeout the error goes to the caller (a handler's
redelivery: shared/runtime/redelivery.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats import errors as nats_errors
from nats.js import JetStreamContext
from nats.js import errors as js_errors

__all__ = ["ATTEMPT_S", "T", "ask_leader", "jetstream_timeout"]

T = TypeVar("T")

ATTEMPT_S = 2.0
"""How long one attempt waits for the leader's answer before it is sent again."""
NO_LEADER_PAUSE_S = 0.25
"""Pause after "no responders" (nobody leads the stream right now) before the next attempt."""
NO_LEADER = (js_errors.NoStreamResponseError, js_errors.ServiceUnavailableError, nats_errors.NoRespondersError)
"""What a request meets while nobody leads the stream or JetStream is electing."""


def jetstream_timeout(js: JetStreamContext) -> float:
    """The timeout a JetStream context was made with (LOOPWIRE_JETSTREAM_TIMEOUT_S for the
    services' contexts)."""
    return float(getattr(js, "_timeout", 5.0))


async def ask_leader(request: Callable[[], Awaitable[T]], *, total_s: float,
                     again: Callable[[], Awaitable[T]] | None = None, attempt_s: float = ATTEMPT_S,
                     timed: bool = False) -> T:
    """`request()`, sent again (`again()` when given) while the leader does not answer,
    for up to `total_s`; each attempt waits at most `attempt_s`. `timed`: the request
    raises TimeoutError by itself within `attempt_s` (the PubAcks' own expiry,
    shared/runtime/pub_acks.py), so no timer is set here for each attempt."""
    deadline = time.monotonic() + total_s
    attempt_s = min(attempt_s, total_s)
    call = request
    while True:
        try:
            if timed:
                return await call()
            # A timer on this task, where wait_for would run the request in a task of its own.
            async with asyncio.timeout(attempt_s):
                return await call()
        except (TimeoutError, *NO_LEADER) as exc:
            pause = 0.0 if isinstance(exc, TimeoutError) else NO_LEADER_PAUSE_S
            if time.monotonic() + pause + attempt_s > deadline:
                raise
            await asyncio.sleep(pause)
            call = again or request
