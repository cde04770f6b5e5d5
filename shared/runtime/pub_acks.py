"""JetStream publishes of events and work, with their PubAcks on one inbox subscription of
the bus's own: what nats-py's `JetStreamContext.publish_async` and `publish` do, for less of
their CPU.

Every stored event of a tool-turn (four or five) is such a publish, and every hop's work
between processes. `publish_async` draws two random bytes from the kernel for each reply
subject, takes a semaphore through `wait_for`, builds the subject in bytearrays, and decodes
each PubAck with the standard library's `json` into a `PubAck` dataclass; `publish` is a
request through the connection's reply mux, decoded the same way. The bus only needs to
know that the stream stored the message, or why not. Here a reply subject is the inbox and
a counter, the answer is decoded by orjson and left a dict, and the errors are nats-py's own
(`NoStreamResponseError` for "no responders", the class `APIError.from_error` raises for
a JetStream error), so the leader's election is handled as before
(shared/stores/stream_leader.py). One difference: nats-py's reply handler lets the
error that `from_error` raises escape, so a JetStream error never reached its future,
which then timed out; here the future fails with it (ServiceUnavailableError, which a
stream without quorum answers, is still an outage: shared/runtime/redelivery.py).
The client's CPU per message on loopback (tests/bench/pub_ack_cost.py): six events at a
time, 32–36 µs with `publish_async` and 21–23 µs here; one 1.5 KB work message at a time,
77–83 µs with `publish` and 57–58 µs here.

A future given up before its answer (cancelled by `bus._cancel`) leaves the table when it
is done; an answer that comes after that is dropped.

Each future fails with nats-py's TimeoutError once `timeout_s` passed without an answer,
checked by one timer per table (every quarter of it, while futures wait) rather than by a
timer per request: `asyncio.timeout` around each awaited PubAck cost 5–9 µs with uvloop's
timer handles, on every publish and every settle of events. The callers' attempts
(shared/stores/stream_leader.py, `ask_leader(..., timed=True)`) rely on it. `InboxReplies`
is the table; the step results sent straight to a router replica use it too
(direct_results.py, `DirectRequests`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Generic, TypeVar

import orjson
from nats import errors as nats_errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import errors as js_errors

from loopwire.shared.runtime.direct_dispatch import dispatch_directly

NO_RESPONDERS_STATUS = "503"

__all__ = ["InboxReplies", "PubAcks"]

Answer = TypeVar("Answer")


class InboxReplies(Generic[Answer]):
    """Requests whose replies come to one inbox subscription of the connection, each to the
    future `send` returned, which fails with nats-py's TimeoutError when no reply came
    within `timeout_s` (to a quarter more)."""

    def __init__(self, nc: NatsClient, timeout_s: float) -> None:
        self._nc = nc
        self.timeout_s = timeout_s
        self._prefix: str | None = None
        self._cut = 0
        self._waiting: dict[str, tuple[asyncio.Future[Answer], float]] = {}
        """Oldest first: tokens count up, and a dict keeps their order."""
        self._sent = 0
        self._subscribing: asyncio.Lock | None = None
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Replies still awaited."""
        return len(self._waiting)

    async def send(self, subject: str, data: bytes, headers: dict[str, str]) -> asyncio.Future[Answer]:
        """Write one request to the connection; the future of its reply (`answer`)."""
        prefix = self._prefix if self._prefix is not None else await self._subscribe()
        self._sent += 1
        token = str(self._sent)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        self._waiting[token] = (future, time.monotonic())
        future.add_done_callback(functools.partial(self._forget, token))
        if self._timer is None:
            self._timer = loop.call_later(self.timeout_s / 4, self._expire)
        try:
            await self._nc.publish(subject, data, reply=prefix + token, headers=headers)
        except BaseException:
            future.cancel()
            raise
        return future

    def _forget(self, token: str, _future: asyncio.Future[Answer]) -> None:
        self._waiting.pop(token, None)

    def _expire(self) -> None:
        """Fail the futures that waited `timeout_s` (the oldest come first)."""
        self._timer = None
        oldest = time.monotonic() - self.timeout_s
        expired = []
        for future, sent in self._waiting.values():
            if sent > oldest:
                break
            expired.append(future)
        for future in expired:
            if not future.done():
                future.set_exception(NatsTimeoutError())
        if len(self._waiting) > len(expired):
            self._timer = asyncio.get_running_loop().call_later(self.timeout_s / 4, self._expire)

    async def _subscribe(self) -> str:
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._prefix is None:
                prefix = f"{self._nc.new_inbox()}."
                sub = await self._nc.subscribe(prefix + "*", cb=self._answered)
                # Each answer settles its future as nats-py reads it (direct_dispatch.py).
                dispatch_directly(sub, self._settle)
                self._cut = len(prefix)
                self._prefix = prefix
        return self._prefix

    async def _answered(self, msg: Msg) -> None:
        self._settle(msg)

    no_responders: type[Exception] = nats_errors.NoRespondersError
    """What a future fails with when NATS answers that nobody listens on the subject."""

    def _settle(self, msg: Msg) -> None:
        entry = self._waiting.get(msg.subject[self._cut:])
        if entry is None or entry[0].done():
            return
        headers = msg.headers
        if headers and headers.get("Status") == NO_RESPONDERS_STATUS:
            entry[0].set_exception(self.no_responders())
        else:
            self.answer(entry[0], msg)

    def answer(self, future: asyncio.Future[Answer], msg: Msg) -> None:
        """Settle `future` with what `msg`, its reply, says (a "no responders" is settled
        before: `no_responders`)."""
        raise NotImplementedError


class PubAcks(InboxReplies[dict[str, Any]]):
    """JetStream publishes; each future is the PubAck's JSON, or nats-py's error for it."""

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> asyncio.Future[dict[str, Any]]:
        """Write one JetStream publish to the connection; the future of its PubAck (the
        answer's JSON), or of nats-py's error for it."""
        return await self.send(subject, data, headers)

    no_responders = js_errors.NoStreamResponseError

    def answer(self, future: asyncio.Future[dict[str, Any]], msg: Msg) -> None:
        try:
            answer = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            future.set_exception(js_errors.APIError(description=f"not a PubAck: {msg.data[:80]!r}"))
            return
        if "error" not in answer:
            future.set_result(answer)
            return
        try:
            js_errors.APIError.from_error(answer["error"])  # raises the error's own class
        except js_errors.APIError as error:
            future.set_exception(error)
        except Exception as error:  # an answer without its fields
            future.set_exception(js_errors.APIError(description=f"a malformed JetStream error: {error!r}"))
