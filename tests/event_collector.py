"""Collecting a session's events in integration tests (a nats-py subscription callback)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from loopwire.shared.contract import codec
from loopwire.shared.contract.subjects import WORK_STREAM, stream_name
from loopwire.shared.runtime.service_context import ServiceContext


@dataclass
class Events:
    """Every event on `<prefix>.out.<sid>.>`, as it arrives."""

    items: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def on_msg(self, msg: Msg) -> None:
        async with self.arrived:
            self.items.append(codec.loads(msg.data))
            self.arrived.notify_all()

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        async def ready() -> list[dict[str, Any]]:
            async with self.arrived:
                await self.arrived.wait_for(lambda: len(self.of(kind)) >= count)
                return self.of(kind)

        return await asyncio.wait_for(ready(), timeout)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.items if e["kind"] == kind]


async def watch_session(ctx: ServiceContext, work_subject: str, durable: str
                        ) -> tuple[str, NatsClient, JetStreamContext, Events, Any]:
    """A fresh session id, a client following its events, and a pull consumer on the work
    subject the service under test publishes to (a work-queue stream: read it as the next
    service would)."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(ctx.settings.nats_url)
    js = nc.jetstream()
    events = Events()
    await nc.subscribe(ctx.subjects.session_events(sid), cb=events.on_msg)
    sub = await js.pull_subscribe(work_subject, durable=durable,
                                  stream=stream_name(ctx.settings.subject_prefix, WORK_STREAM))
    await nc.flush()
    return sid, nc, js, events, sub
