"""A core-NATS request/reply responder of the llm service (`rpc.llm.summarize`,
`rpc.llm.count_tokens`): one queue group across replicas, each request answered in its own
task, since nats-py calls a subscription's callback one message at a time and one slow
request must not hold up the others. Stopping cancels the requests still running; their
callers time out and ask again."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg


class CoreResponder:
    """Subclasses answer one request in `_reply`."""

    def __init__(self, subject: str, queue: str) -> None:
        self.subject = subject
        self.queue = queue
        self._sub: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, nc: NatsClient) -> None:
        self._sub = await nc.subscribe(self.subject, queue=self.queue, cb=self._on_msg)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _on_msg(self, msg: Msg) -> None:
        task = asyncio.create_task(self._reply(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reply(self, msg: Msg) -> None:
        raise NotImplementedError
