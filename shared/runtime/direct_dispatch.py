"""A nats-py subscription whose messages go to a plain function the moment they are read.

nats-py hands every message of a callback subscription to that callback through the
subscription's own queue and task: `put_nowait` as the message is parsed, then the task
wakes, `get`s it, awaits the callback, marks it done. Where the callback only starts a task
of its own (a work message's handler, a direct result's) or settles a future (a PubAck),
that queue and task are a task switch and some twenty calls more per message, and a hop
begins with one: in a process woken for one message, a few tens of µs on the hop's path.

`dispatch_directly(sub, deliver)` puts a stand-in for the queue on a subscription nats-py
made with a callback: `deliver(msg)` (not a coroutine) is called from nats-py's read
loop, in the order messages come. The subscription's task waits on its original queue,
which no longer fills, until nats-py cancels it (unsubscribe, drain, close); what
`drain` and the slow-consumer accounting read of the queue stays true (nothing is ever
pending). A nats-py without those attributes keeps its queue (False): the callback it was
given still gets every message, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["dispatch_directly", "log"]

log = logging.getLogger("loopwire.nats")

Deliver = Callable[[Msg], None]


class _Dispatch:
    """What nats-py calls on a subscription's pending queue, as the queue of a subscription
    whose messages never wait."""

    __slots__ = ("_deliver", "_sub")

    def __init__(self, sub: Any, deliver: Deliver) -> None:
        self._sub = sub
        self._deliver = deliver

    def put_nowait(self, msg: Msg) -> None:
        self._sub._pending_size -= len(msg.data)  # counted by nats-py as it queued it
        try:
            self._deliver(msg)
        except Exception:  # as nats-py's task would: the read loop goes on
            log.exception("handling a message on %s failed", msg.subject)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def full(self) -> bool:
        return False

    def task_done(self) -> None:
        pass

    async def join(self) -> None:
        return None

    async def get(self) -> Msg:
        # Only the subscription's own task gets (a callback subscription has no `next_msg`):
        # it waits here, as on an empty queue, until nats-py cancels it.
        return await asyncio.get_running_loop().create_future()


def dispatch_directly(sub: Any, deliver: Deliver) -> bool:
    """Hand the messages of `sub` (a callback subscription just made, or a JetStream push
    subscription over one) to `deliver` from now on; any it queued already go first. True
    when it could."""
    inner = getattr(sub, "_sub", None)
    if isinstance(inner, Subscription):  # a JetStream push subscription: nats-py feeds the one it wraps
        sub = inner
    queue = getattr(sub, "_pending_queue", None)
    if not isinstance(queue, asyncio.Queue) or not hasattr(sub, "_pending_size") or sub._cb is None:
        return False
    sub._pending_queue = _Dispatch(sub, deliver)
    while not queue.empty():
        sub._pending_queue.put_nowait(queue.get_nowait())
    return True
