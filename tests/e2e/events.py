"""Following a session's events with plain nats-py, as any client would."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from nats.aio.client import Client as NatsClient

from loopwire.shared.contract.events import validate_event
from loopwire.shared.contract.protocol import EPHEMERAL_KINDS


class SessionEvents:
    def __init__(self, nc: NatsClient, sid: str, prefix: str = "loopwire") -> None:
        self.nc = nc
        self.sid = sid
        self.prefix = prefix
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._sub: Any = None

    async def __aenter__(self) -> SessionEvents:
        async def on_msg(msg: Any) -> None:
            event = json.loads(msg.data)
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()

        self._sub = await self.nc.subscribe(f"{self.prefix}.out.{self.sid}.>", cb=on_msg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._sub.unsubscribe()

    async def publish(self, verb: str, body: dict[str, Any] | bytes, msg_id: str | None = None) -> dict[str, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Nats-Msg-Id": msg_id or uuid.uuid4().hex}
        ack = await self.nc.request(f"{self.prefix}.in.{self.sid}.{verb}", data, timeout=5, headers=headers)
        return json.loads(ack.data)

    async def wait_for(self, kind: str, timeout: float = 20.0, count: int = 1, **match: Any) -> dict[str, Any]:
        """The `count`-th event of `kind` whose fields equal `match`."""
        def found() -> dict[str, Any] | None:
            hits = [e for e in self.events if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]
            return hits[count - 1] if len(hits) >= count else None

        async with asyncio.timeout(timeout):
            async with self._changed:
                while (hit := found()) is None:
                    await self._changed.wait()
        return hit

    def check_bodies(self) -> None:
        """Every event seen matches its kind's model (shared/contract/events.py)."""
        for event in self.events:
            validate_event(event)

    def check_each_seq_once(self) -> None:
        """No event reached this subscriber twice (its seq again: protocol.md, "seq")."""
        seqs = [e["seq"] for e in self.events]
        repeated = sorted({seq for seq in seqs if seqs.count(seq) > 1})
        assert not repeated, f"seqs delivered more than once: {repeated}"

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]

    def durable(self) -> list[dict[str, Any]]:
        """Events a transcript keeps (text.delta and the progress events are ephemeral)."""
        return [e for e in self.events if e["kind"] not in EPHEMERAL_KINDS]


async def query(nc: NatsClient, what: str, body: dict[str, Any] | bytes, prefix: str = "loopwire") -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await nc.request(f"{prefix}.api.{what}", data, timeout=5)
    return json.loads(reply.data)
