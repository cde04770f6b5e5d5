"""The published tool catalog in Redis: what the tools service offers, for every reader.

The tools service (services/tools/catalog.py) publishes its catalog after every discovery
round, so other services (the memory service builds the model's tool list from it, the
router checks a start's tools and the plan gate's schemas) read it without a hop::

    HSET <keys.TOOL_CATALOG> <tool name> '{"name", "description", "input_schema",
                                        "source": "python"|"nats"|"mcp", "exclusive", "seen_at",
                                        "owner": "<tools process id>"}'
    HSET <keys.TOOL_CATALOG_OWNERS> <tools process id> '{"tools": [<tool name>, ...], "at"}'

`seen_at` is when the entry was last confirmed. Readers ignore entries older than
`catalog_max_age(settings)`, and an entry with an `owner` that no live tools process lists
(an owner whose listing is older than that age, or gone): a tools process that stopped,
or was started again with other providers, leaves nothing on offer that nobody serves.
Every tools process writes its listing before its entries, each round; it removes its
own listing when it stops, and the listings of processes that are gone (NATS has no
responder on their liveness subject), with the entries no live process lists. An entry
without `owner` (written by an older release) is judged by its age alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import orjson
import redis.asyncio as aioredis

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ToolSpec

__all__ = ["CACHE_TTL_S", "CatalogCache", "CatalogEntry", "OwnerAlive", "catalog_max_age", "log", "publish_entries",
           "read_catalog", "read_catalog_entries", "withdraw"]

log = logging.getLogger("loopwire.tool_catalog")

CACHE_TTL_S = 1.0
"""How long a reader reuses the catalog it read (never longer than a discovery round)."""


class DiscoveryTiming(Protocol):
    """The settings a catalog reader needs (`RuntimeSettings` has them)."""

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
    owner: str | None = None
    """The tools process that wrote it (None: a writer of an older release)."""

    def to_json(self) -> bytes:
        d = {"name": self.name, "description": self.description, "input_schema": self.input_schema,
             "source": self.source, "exclusive": self.exclusive, "seen_at": self.seen_at}
        if self.owner is not None:
            d["owner"] = self.owner
        return orjson.dumps(d)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, input_schema=self.input_schema)

    @classmethod
    def from_json(cls, raw: bytes | str) -> CatalogEntry:
        d = orjson.loads(raw)
        return cls(name=d["name"], description=d.get("description", ""),
                   input_schema=d.get("input_schema") or {"type": "object"},
                   source=d.get("source", "nats"), exclusive=bool(d.get("exclusive", False)),
                   seen_at=float(d.get("seen_at", 0)),
                   owner=d["owner"] if isinstance(d.get("owner"), str) else None)


@dataclass(frozen=True)
class OwnerListing:
    """What one tools process serves, as it last published it."""

    tools: frozenset[str]
    at: float

    def to_json(self) -> bytes:
        return orjson.dumps({"tools": sorted(self.tools), "at": self.at})

    @classmethod
    def from_json(cls, raw: bytes | str) -> OwnerListing:
        d = orjson.loads(raw)
        return cls(tools=frozenset(str(n) for n in d.get("tools") or []), at=float(d.get("at", 0)))


def read_listings(raw: dict[Any, Any]) -> dict[str, OwnerListing | None]:
    """HGETALL of keys.TOOL_CATALOG_OWNERS, decoded (None: an unreadable listing)."""
    out: dict[str, OwnerListing | None] = {}
    for raw_owner, raw_listing in raw.items():
        owner = raw_owner.decode() if isinstance(raw_owner, bytes) else str(raw_owner)
        try:
            out[owner] = OwnerListing.from_json(raw_listing)
        except Exception:
            out[owner] = None
    return out


def served_names(listings: dict[str, OwnerListing | None], max_age_s: float, now: float) -> set[str]:
    """The tool names some tools process listed within `max_age_s`."""
    return {name for listing in listings.values() if listing is not None and listing.at >= now - max_age_s
            for name in listing.tools}


def on_offer(entry: CatalogEntry, served: set[str], max_age_s: float, *, now: float) -> bool:
    """Whether readers offer `entry`: fresh, and listed by a live owner if it has one."""
    return entry.seen_at >= now - max_age_s and (entry.owner is None or entry.name in served)


async def read_catalog_entries(redis: aioredis.Redis, max_age_s: float,
                               now: float | None = None) -> dict[str, CatalogEntry]:
    """Every entry of the published catalog on offer now, by name (sorted)."""
    now = time.time() if now is None else now
    # Entries first: a writer lists its tools before it writes their entries, so the
    # listings read after an entry hold its owner's.
    raw_entries = await redis.hgetall(keys.TOOL_CATALOG)
    served = served_names(read_listings(await redis.hgetall(keys.TOOL_CATALOG_OWNERS)), max_age_s, now)
    out: dict[str, CatalogEntry] = {}
    for raw_name, raw in raw_entries.items():
        try:
            entry = CatalogEntry.from_json(raw)
        except Exception:
            log.warning("unreadable catalog entry %r ignored", raw_name)
            continue
        if on_offer(entry, served, max_age_s, now=now):
            out[entry.name] = entry
    return dict(sorted(out.items()))


_DELETE_UNCHANGED_LUA = """
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 0
"""
"""Deletes each (field, value) pair of ARGV from the hash KEYS[1] if the field still holds
that value: an entry another process rewrote meanwhile stays."""

OwnerAlive = Callable[[str], Awaitable[bool]]
"""Whether the tools process with this id is running (False only when it surely is not)."""


async def publish_entries(redis: aioredis.Redis, *, owner: str, entries: dict[str, CatalogEntry],
                          max_age_s: float, alive: OwnerAlive | None = None, now: float | None = None) -> None:
    """Write what the tools process `owner` serves (its listing, then `entries`), and
    remove what no live tools process serves: the listings of processes that are gone
    (past `max_age_s`, or `alive` says so) and the entries no live listing names (or past
    `max_age_s`). `entries={}` with `withdraw` is how a stopping process leaves."""
    now = time.time() if now is None else now
    listing = OwnerListing(frozenset(entries), now)
    await redis.hset(keys.TOOL_CATALOG_OWNERS, owner, listing.to_json())  # before the entries: readers rely on it
    raw_entries = await redis.hgetall(keys.TOOL_CATALOG)
    listings = read_listings(await redis.hgetall(keys.TOOL_CATALOG_OWNERS))
    listings[owner] = listing
    gone = await gone_owners(listings, max_age_s=max_age_s, alive=alive, now=now, me=owner)
    served = served_names({o: v for o, v in listings.items() if o not in gone}, max_age_s, now)
    mine = {name: replace(e, owner=owner).to_json() for name, e in entries.items()}
    pipe = redis.pipeline(transaction=False)
    if mine:
        pipe.hset(keys.TOOL_CATALOG, mapping=mine)  # type: ignore[arg-type]
    if gone:
        pipe.hdel(keys.TOOL_CATALOG_OWNERS, *gone)
    await pipe.execute()
    await _delete_unchanged(redis, _not_served(raw_entries, mine, served, max_age_s=max_age_s, now=now))


async def withdraw(redis: aioredis.Redis, *, owner: str, max_age_s: float, alive: OwnerAlive | None = None) -> None:
    """A stopping tools process's leave: its listing goes, and its entries that no other
    live process lists."""
    await publish_entries(redis, owner=owner, entries={}, max_age_s=max_age_s, alive=alive)
    await redis.hdel(keys.TOOL_CATALOG_OWNERS, owner)


async def gone_owners(listings: dict[str, OwnerListing | None], *, max_age_s: float, alive: OwnerAlive | None,
                      now: float, me: str) -> list[str]:
    """The owners among `listings` that are surely not running: unreadable or stale
    listings, and those `alive` finds gone (asked together)."""
    gone = [o for o, v in listings.items() if o != me and (v is None or v.at < now - max_age_s)]
    others = [o for o in listings if o != me and o not in gone]
    if alive is not None and others:
        answers = await asyncio.gather(*(alive(o) for o in others))
        gone += [o for o, up in zip(others, answers, strict=True) if not up]
    return sorted(gone)


def _not_served(raw_entries: dict[Any, Any], mine: dict[str, bytes], served: set[str], *, max_age_s: float,
                now: float) -> dict[str, Any]:
    """The entries of `raw_entries` (HGETALL) to delete: not this writer's, and not on offer."""
    out: dict[str, Any] = {}
    for raw_name, raw in raw_entries.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        if name in mine:
            continue
        try:
            keep = on_offer(CatalogEntry.from_json(raw), served, max_age_s, now=now)
        except Exception:
            keep = False
        if not keep:
            out[name] = raw
    return out


async def _delete_unchanged(redis: aioredis.Redis, fields: dict[str, Any]) -> None:
    if fields:
        args = [part for name, raw in fields.items() for part in (name, raw)]
        await redis.eval(_DELETE_UNCHANGED_LUA, 1, keys.TOOL_CATALOG, *args)  # type: ignore[misc]


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
