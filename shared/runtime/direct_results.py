"""Step results straight to the router replica that asked for them: a core NATS request
to that replica, answered once the result is applied and committed; JetStream when the
replica does not answer.

Between separate processes (`loopwire serve`) a step result used to travel as a JetStream
work message on `work.router.result`, taken by whichever router replica its deliver group
picked: a stored message, its PubAck, a delivery and an ack per result, and with two
routers most results reached the replica that did not make the session's last commit and
had to load the session's state again. The router that publishes a step's work names
itself in it (`result_to`, its replica id); the service that produced the result asks
that replica on `<prefix>.direct.<service>.<replica>` (`Subjects.direct`).

Nothing is less durable than before: the result is recorded (shared/stores/step_store.py)
before it is handed over, and the producing handler's own work message stays unsettled
until the request is answered, exactly as for a call in process (handover.py). So:
- the replica answers after its commit: the result is applied;
- no replica listens (gone, stopping: NATS answers "no responders" at once): the result
  goes to JetStream at once, no attempt counted;
- the replica answers with an error (it could not apply it), or does not answer within
  LOOPWIRE_DIRECT_RESULT_TIMEOUT_S (it died in the middle): the result goes to JetStream
  after the pause of a failed call in process, its attempt counted. A result the replica
  did apply after all is then ignored by whichever router takes the message (its step is
  not the one the run waits for any more).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from pydantic import BaseModel

from loopwire.shared.contract import codec
from loopwire.shared.runtime.bus import work_headers
from loopwire.shared.runtime.direct_dispatch import dispatch_directly
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.pub_acks import InboxReplies
from loopwire.shared.runtime.redelivery import is_outage

__all__ = ["Apply", "DirectDeliveryFailed", "DirectReceiver", "DirectRequests", "log", "request_applied",
           "result_applied"]

log = logging.getLogger("loopwire.direct")

FAILED_HEADER = "Loopwire-Direct-Failed"
"""On a replica's answer: it could not apply the result; `outage` or `fault`."""

Apply = Callable[[bytes, dict[str, str]], Awaitable[None]]
"""Applies a result's body (with its request headers); raises when it could not."""


class DirectDeliveryFailed(Exception):
    """The replica answered that it could not apply the result (a fault)."""

    outage = False

    def __init__(self, subject: str) -> None:
        super().__init__(f"{subject}: the replica could not apply the result ({'outage' if self.outage else 'fault'})")


class ReplicaOutage(DirectDeliveryFailed, ConnectionError):
    """The replica could not apply it because a server was away: waited out as an outage
    (redelivery.is_outage)."""

    outage = True


class DirectRequests(InboxReplies[Msg]):
    """The direct results this process sends, their answers on an inbox of its own
    (pub_acks.py): nats-py's `request` draws random bytes from the kernel for each reply
    subject and waits with `wait_for`, a timer and a task switch per request, on the path
    of every step's result between processes."""

    def answer(self, future: asyncio.Future[Msg], msg: Msg) -> None:
        future.set_result(msg)


async def result_applied(requests: DirectRequests, subject: str, envelope: BaseModel, *, msg_id: str,
                         recover: bool) -> bool:
    """`request_applied` for a step result: its JSON, with the headers its work message would
    have (bus.work_headers)."""
    headers = work_headers(envelope, msg_id, recover=recover)
    return await request_applied(requests, subject, codec.dumps(envelope), headers=headers)


async def request_applied(requests: DirectRequests, subject: str, data: bytes, *, headers: dict[str, str]) -> bool:
    """True once the replica on `subject` applied the result; False when none listens
    there. Raises when it answered that it could not apply it (DirectDeliveryFailed), or
    did not answer within the requests' timeout (nats' TimeoutError)."""
    try:
        reply = await (await requests.send(subject, data, headers))
    except NoRespondersError:
        return False
    failed = (reply.headers or {}).get(FAILED_HEADER)
    if failed:
        raise (ReplicaOutage if failed == "outage" else DirectDeliveryFailed)(subject)
    return True


class _FirstDelivery:
    """What the consume scope reads of a delivery's JetStream metadata: a request is
    delivered once (its sender publishes it when it is not answered)."""

    consumer = "direct"
    num_delivered = 1


class DirectDelivery:
    """A direct request as the observability layer's consume scope sees a work message
    (HOOKS.consume_scope): its log context, its trace context and a CONSUMER span
    `<subject> process`, the message metrics."""

    __slots__ = ("outcome", "raw_message")
    metadata = _FirstDelivery()

    def __init__(self, msg: Msg) -> None:
        self.raw_message = msg
        self.outcome: str | None = None


class DirectReceiver:
    """This replica's subscription to its direct subject: every request applied in a task
    of its own (a session's lock orders them, as for work messages), and answered."""

    def __init__(self, subject: str, apply: Apply) -> None:
        self.subject = subject
        self._apply = apply
        self._sub: Subscription | None = None
        self._nc: NatsClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, nc: NatsClient) -> None:
        self._nc = nc
        self._sub = await nc.subscribe(self.subject, cb=self._on_request)
        dispatch_directly(self._sub, self._take)  # a task per request as nats-py reads it

    async def _on_request(self, msg: Msg) -> None:
        self._take(msg)

    def _take(self, msg: Msg) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg) -> None:
        headers: dict[str, str] = {}
        delivery = DirectDelivery(msg)
        with HOOKS.consume_scope(delivery):
            try:
                await self._apply(msg.data, msg.headers or {})
            except Exception as exc:
                outage = is_outage(exc)
                log.warning("a direct result on %s was not applied (%s: %s); its sender publishes it",
                            self.subject, type(exc).__name__, exc)
                headers[FAILED_HEADER] = "outage" if outage else "fault"
                delivery.outcome = "nacked"
        if msg.reply and self._nc is not None:
            try:
                await self._nc.publish(msg.reply, b"", headers=headers or None)
            except Exception as exc:  # the connection is gone: the sender times out and publishes
                log.debug("no answer sent on %s: %s", self.subject, exc)

    async def stop(self, timeout: float) -> None:
        """No new request is taken (senders find no responder and publish to JetStream);
        those in flight get up to `timeout` seconds to be applied and answered."""
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("unsubscribing %s: %s", self.subject, exc)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
