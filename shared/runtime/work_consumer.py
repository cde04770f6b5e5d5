"""The work consumers: durable JetStream push consumers read with nats-py.

Every work subject (`work.*`, ingress, the dead letters) is consumed here rather than
through a FastStream subscriber: FastStream costs ~120 µs of CPU per message received
(its task group and limiter over anyio, the message model, the middleware chain) where a
nats-py callback costs ~5-15 µs, and a tool-turn of the split layout receives five work
messages (docs/architecture.md, "The consume path", has the measurements). FastStream
keeps the rest: the queries and RPC subjects, the AsyncAPI document, the broker's
connection, which these subscriptions share.

What a FastStream subscriber gave a work handler, each consumer gives it too: the same
durable consumer and deliver group (so a process of the previous release and one of this
one share the work), at most `max_workers` handlers at once, a graceful stop that lets the
handlers in flight finish, and through the observability layer (HOOKS.consume_scope) the
log context, trace context, message metrics and consumer spans of its middlewares.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from nats.aio.msg import Msg
from nats.errors import NotJSMessageError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from loopwire.shared.runtime.bus import ATTEMPTS_HEADER, RECOVER_HEADER
from loopwire.shared.runtime.chain import Chain, Delivery
from loopwire.shared.runtime.direct_dispatch import dispatch_directly
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.redelivery import RedeliveryPolicy

__all__ = ["JetStreamRoot", "WorkConsumer", "delivery_metadata", "log", "root_delivery"]

log = logging.getLogger("loopwire.consumer")

PENDING_MSGS_LIMIT = 512 * 1024
PENDING_BYTES_LIMIT = 256 * 1024 * 1024
"""nats-py's buffer of delivered messages not yet taken by the callback (its JetStream
defaults, which FastStream passed as well)."""


class DeliveryMetadata(NamedTuple):
    """What the runtime reads of a JetStream message's metadata (the consume scope, the
    delivery count), taken from its reply subject's tokens: nats-py's `Msg.metadata` also
    makes its timestamp a datetime and builds two frozen dataclasses, ~10 µs a message."""

    stream: str
    consumer: str
    num_delivered: int
    stream_seq: int
    consumer_seq: int
    num_pending: int


def delivery_metadata(reply: str) -> DeliveryMetadata:
    """The metadata of a JetStream ack subject, as nats-py reads it: `$JS.ACK.<stream>.
    <consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`, or the form with a
    domain and an account hash before the stream. Raises NotJSMessageError for anything else."""
    tokens = reply.split(".") if reply else []
    if len(tokens) == 9:
        at = 2
    elif len(tokens) >= 11:
        at = 4
    else:
        raise NotJSMessageError
    if tokens[0] != "$JS" or tokens[1] != "ACK":
        raise NotJSMessageError
    return DeliveryMetadata(tokens[at], tokens[at + 1], int(tokens[at + 2]), int(tokens[at + 3]),
                            int(tokens[at + 4]), int(tokens[at + 6]))


class JetStreamRoot:
    """A JetStream message as the root of a work chain (`Chain.root`): settled once, and
    `outcome` says how (for the message metrics), None while it is not."""

    __slots__ = ("_metadata", "outcome", "raw_message")

    def __init__(self, msg: Msg) -> None:
        self.raw_message = msg
        self.outcome: str | None = None
        self._metadata: DeliveryMetadata | None = None

    @property
    def body(self) -> bytes:
        return self.raw_message.data

    @property
    def metadata(self) -> DeliveryMetadata:
        """The message's JetStream metadata, parsed once (nats-py parses its reply subject
        again at every `Msg.metadata`). Raises NotJSMessageError for a core message."""
        if self._metadata is None:
            self._metadata = delivery_metadata(self.raw_message.reply)
        return self._metadata

    async def ack(self) -> None:
        if not self.raw_message.is_acked:
            await self.raw_message.ack()
            self.outcome = "acked"

    async def nack(self, delay: float | None = None) -> None:
        if not self.raw_message.is_acked:
            await self.raw_message.nak(delay=delay)
            self.outcome = "nacked"

    async def reject(self) -> None:
        if not self.raw_message.is_acked:
            await self.raw_message.term()
            self.outcome = "rejected"

    async def in_progress(self) -> None:
        if not self.raw_message.is_acked:
            await self.raw_message.in_progress()


def root_delivery(msg: Any, ack_wait_s: float, holds: bool, *, policy: RedeliveryPolicy | None = None,
                  report: Any = None) -> Delivery:
    """A JetStream message (a `JetStreamRoot`) as the root `Delivery` of a work chain. Its
    delivery count adds the attempts a hop had in process before it was published
    (bus.ATTEMPTS_HEADER)."""
    raw = msg.raw_message
    headers = raw.headers or {}
    delivered = delivery_count(msg) + _attempts(headers.get(ATTEMPTS_HEADER))
    redelivered = delivered > 1 or bool(headers.get(RECOVER_HEADER))
    return Delivery(msg.body, Chain(msg, delivered, ack_wait_s, holds=holds, policy=policy, report=report), redelivered=redelivered,
                    raw_message=raw)


def delivery_count(msg: Any) -> int:
    """Which delivery of its JetStream message this is (1 for anything else)."""
    try:
        return int(msg.metadata.num_delivered)
    except Exception:  # not a JetStream message
        return 1


def _attempts(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


RootHandler = Callable[[JetStreamRoot], Awaitable[None]]


class WorkConsumer:
    """One durable push consumer with a deliver group of the same name, bound by
    `start()` on a connection and stopped gracefully by `stop()`."""

    def __init__(self, subject: str, *, stream: str, durable: str, config: ConsumerConfig,
                 handle: RootHandler, max_workers: int = 64) -> None:
        self.subject = subject
        self.stream = stream
        self.durable = durable
        self.config = config
        self.handle = handle
        self.max_workers = max_workers
        self._slots = asyncio.Semaphore(max_workers)
        self._tasks: dict[asyncio.Task[None], Msg] = {}
        """The handlers running, with the message each holds (handed back if a drain ends it)."""
        self._waiting: collections.deque[Msg] = collections.deque()
        """Messages taken while `max_workers` handlers ran (direct dispatch), in order."""
        self._direct = False
        self._sub: Any = None
        self._stopping = False

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start(self, js: JetStreamContext) -> None:
        """Create the durable consumer if it does not exist, and join its deliver group."""
        if self._sub is not None:
            return
        self._stopping = False
        self._sub = await js.subscribe(self.subject, queue=self.durable, durable=self.durable, stream=self.stream,
                                       config=self.config, manual_ack=True, cb=self._on_message,
                                       pending_msgs_limit=PENDING_MSGS_LIMIT, pending_bytes_limit=PENDING_BYTES_LIMIT)
        # Each message's handler starts as nats-py reads it (direct_dispatch.py); past
        # `max_workers` running, messages wait here in order instead of in nats-py's queue.
        self._direct = dispatch_directly(self._sub, self._take)

    async def _on_message(self, msg: Msg) -> None:
        """nats-py's callback, where its queue stayed in place."""
        if self._stopping:
            return  # left unacked: another replica takes it after ack_wait
        # Waiting for a slot holds up this subscription's later messages, not the others'.
        await self._slots.acquire()
        self._start(msg)

    def _take(self, msg: Msg) -> None:
        if self._stopping:
            return  # left unacked: another replica takes it after ack_wait
        if len(self._tasks) < self.max_workers and not self._waiting:
            self._start(msg)
        else:
            self._waiting.append(msg)

    def _start(self, msg: Msg) -> None:
        task = asyncio.get_running_loop().create_task(self._run(msg))
        self._tasks[task] = msg
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not self._direct:
            self._slots.release()
        elif self._waiting and not self._stopping:
            self._start(self._waiting.popleft())

    async def _run(self, msg: Msg) -> None:
        root = JetStreamRoot(msg)
        try:
            with HOOKS.consume_scope(root):
                await self.handle(root)
        except Exception:  # the runner settles every outcome; this is an ack that failed
            log.exception("the handler of %s failed to settle its message", self.subject)

    async def stop(self, timeout: float) -> None:
        """The drain: leave the deliver group (new messages go to the other replicas), hand
        back the messages taken but not started, then wait up to `timeout` for the
        handlers in flight; those still running then are cancelled (their claims released
        on the way out: llm/service.py, tools/executor.py) and their messages handed back.
        Handed back is a nak with no delay, so another replica takes the message at once
        instead of after ack_wait."""
        self._stopping = True
        waiting, self._waiting = list(self._waiting), collections.deque()
        if self._sub is not None:
            with contextlib.suppress(Exception):  # the connection may be gone already
                await self._sub.unsubscribe()
            self._sub = None
        await _hand_back(waiting)
        if not self._tasks:
            return
        _, unfinished = await asyncio.wait(set(self._tasks), timeout=timeout)
        if not unfinished:
            return
        held = [self._tasks[task] for task in unfinished if task in self._tasks]
        log.warning("drain of %s: %d handler(s) still running after %.0f s, handed back",
                    self.subject, len(unfinished), timeout)
        for task in unfinished:
            task.cancel()
        await asyncio.wait(unfinished, timeout=CANCEL_GRACE_S)
        await _hand_back(held)


CANCEL_GRACE_S = 2.0
"""How long cancelled handlers get to run their cleanup (releasing a claim is one Redis call)."""


async def _hand_back(messages: list[Msg]) -> None:
    for msg in messages:
        if msg.is_acked:
            continue
        with contextlib.suppress(Exception):  # the connection may be gone: ack_wait then
            await msg.nak()
