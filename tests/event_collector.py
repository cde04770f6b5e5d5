"""Collecting a session's events in integration tests (a nats-py subscription callback)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg

from loopwire.shared import codec


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
