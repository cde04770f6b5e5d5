"""The published tool catalog in Redis: what the tools service offers, for every reader.

The tools service (services/tools/catalog.py) publishes its catalog after every discovery
round, so other services (the memory service builds the model's tool list from it, the
router checks a start's tools and the plan gate's schemas) read it without a hop::

    HSET <keys.TOOL_CATALOG> <tool name> '{"name", "description", "input_schema",
                                        "source": "python"|"nats"|"mcp", "exclusive", "seen_at"}'

`seen_at` is when the entry was last confirmed. Readers ignore entries older than
`catalog_max_age(settings)`; the writer deletes the entries it forgot and any entry past
that age (a writer that died leaves nothing behind for long).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
import redis.asyncio as aioredis

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ToolSpec

log = logging.getLogger("loopwire.tool_catalog")

CACHE_TTL_S = 1.0
"""How long a reader reuses the catalog it read (never longer than a discovery round)."""


class DiscoveryTiming(Protocol):
    """The settings a catalog reader needs (`Settings` has them)."""

    @property
    def discovery_interval_s(self) -> float: ...

    @property
    def discovery_misses(self) -> int: ...


def catalog_max_age(settings: DiscoveryTiming) -> float:
    """How old a catalog entry may be before readers ignore it."""
    return settings.discovery_interval_s * settings.discovery_misses * 2


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    description: str
    input_schema: dict[str, Any]
    source: Literal["python", "nats", "mcp"]
    exclusive: bool
    seen_at: float

    def to_json(self) -> bytes:
        return orjson.dumps({"name": self.name, "description": self.description,
                             "input_schema": self.input_schema, "source": self.source,
                             "exclusive": self.exclusive, "seen_at": self.seen_at})

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, input_schema=self.input_schema)

    @classmethod
    def from_json(cls, raw: bytes | str) -> CatalogEntry:
        d = orjson.loads(raw)
        return cls(name=d["name"], description=d.get("description", ""),
                   input_schema=d.get("input_schema") or {"type": "object"},
                   source=d.get("source", "nats"), exclusive=bool(d.get("exclusive", False)),
                   seen_at=float(d.get("seen_at", 0)))


async def read_catalog_entries(redis: aioredis.Redis, max_age_s: float,
                               now: float | None = None) -> dict[str, CatalogEntry]:
    """Every fresh entry of the published catalog, by name (sorted)."""
    now = time.time() if now is None else now
    out: dict[str, CatalogEntry] = {}
    for raw_name, raw in (await redis.hgetall(keys.TOOL_CATALOG)).items():
        try:
            entry = CatalogEntry.from_json(raw)
        except Exception:
            log.warning("unreadable catalog entry %r ignored", raw_name)
            continue
        if entry.seen_at >= now - max_age_s:
            out[entry.name] = entry
    return dict(sorted(out.items()))


async def read_catalog(redis: aioredis.Redis, max_age_s: float) -> dict[str, ToolSpec]:
    """The tools known to the tools service now, as offered to the model (for the
    memory service). `max_age_s` is normally `catalog_max_age(settings)`."""
    return {name: e.spec() for name, e in (await read_catalog_entries(redis, max_age_s)).items()}


class CatalogCache:
    """`read_catalog` for a service that asks on every step (the router's schema gate,
    the memory service's tool list): the catalog read is reused for
    min(`CACHE_TTL_S`, the discovery interval), since it cannot change faster than
    discovery publishes it. A caller that names a tool the copy lacks (a tool that just
    appeared) reads again at once.

    One read at a time: the callers that find the copy expired together (every session
    of a busy process, the moment the TTL runs out) wait for the same read instead of
    each sending its own HGETALL, which would also grow redis-py's pool by a connection
    per waiting caller."""

    def __init__(self, redis: aioredis.Redis, settings: DiscoveryTiming,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._max_age = catalog_max_age(settings)
        self._ttl = max(0.0, min(CACHE_TTL_S, settings.discovery_interval_s))
        self._clock = clock
        self._specs: dict[str, ToolSpec] | None = None
        self._until = 0.0
        self._reading: asyncio.Future[dict[str, ToolSpec]] | None = None

    async def get(self, names: Iterable[str] | None = None) -> dict[str, ToolSpec]:
        specs = self._specs
        if specs is not None and self._clock() < self._until and (names is None or all(n in specs for n in names)):
            return specs
        reading = self._reading
        if reading is None:
            reading = self._reading = asyncio.ensure_future(self._read())
            # a failed read whose every waiter was cancelled is still looked at: no
            # "exception was never retrieved" in the log for an error no caller is left for
            reading.add_done_callback(_looked_at)
        # shield: one caller cancelled (its run aborted) leaves the read to the others
        return await asyncio.shield(reading)

    async def _read(self) -> dict[str, ToolSpec]:
        try:
            specs = await read_catalog(self._redis, self._max_age)
            self._specs, self._until = specs, self._clock() + self._ttl
            return specs
        finally:
            self._reading = None


def _looked_at(reading: asyncio.Future[dict[str, ToolSpec]]) -> None:
    if not reading.cancelled():
        reading.exception()
