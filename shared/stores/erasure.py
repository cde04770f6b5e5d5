"""Removing one session from every store loopwire keeps, and saying what was removed.

What a session leaves where (shared/contract/keys.py names every key):

- its own keys, all in its Redis Cluster slot, all carrying its hash tag `{<sid>}`: state
  and history, the event log, memory (compaction, observations, reflections, usage,
  locks), step records, claims and fences, a wait for the model limits, the external
  agent's session, its forks list, the user ids its runs carried. They are found by the tag whatever their name (a SCAN on
  one server, the slot's keys on a Redis Cluster), so a key added later is removed too,
  and deleted with DELs of that one slot;
- entries in keys that span sessions: the sessions index, the running set, the user
  indexes, its source's forks list (a fork), the strategy actors' lists (a copy of each
  of its observations and reflections), and its large content (keys.blob, by digest:
  removed unless a session of its lineage, its source or a fork, refers to it too);
- its messages in LOOPWIRE_EVENTS (`<prefix>.out.<sid>.>`) and LOOPWIRE_INGRESS
  (`<prefix>.in.<sid>.*`): one purge with a subject filter each, which removes them from
  every replica of the stream.

Each step is idempotent: a delete cut short is finished by the same steps again.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import orjson
import redis.asyncio as aioredis
from nats.js import JetStreamContext
from redis.crc import key_slot

from loopwire.shared.contract import keys
from loopwire.shared.contract.query_replies import StoreRemoved
from loopwire.shared.contract.subjects import EVENTS_STREAM, INGRESS_STREAM, Subjects, stream_name
from loopwire.shared.stores.blobs import REF_KEY
from loopwire.shared.stores.redis_connection import is_cluster

__all__ = ["STORES", "SessionKeys", "blob_refs", "lineage_blobs", "purge_session_messages", "receipt", "records",
           "remove_actor_notes", "remove_blobs", "remove_index_entries", "store_of"]

STORES = (
    "session_state",
    "history",
    "event_log",
    "memory",
    "step_records",
    "executor",
    "user_index",
    "indexes",
    "blobs",
    "events_stream",
    "ingress_stream",
)
"""Every store a delete reports, in its reply's order (each listed, 0 when it held nothing)."""

_KIND_STORE = {
    "s": "session_state",
    "h": "history",
    "seq": "event_log",
    "ek": "event_log",
    "e": "event_log",
    "mem": "memory",
    "step": "step_records",
    "claim": "step_records",
    "fence": "step_records",
    "exec": "executor",
    "users": "user_index",
    "forks": "indexes",
    "mw": "step_records",
}
_REF = re.compile(rb'"' + REF_KEY.encode() + rb'":\{"sha256":"([0-9a-f]{64})"')
_BATCH = 200
SLOT_KEYS_MAX = 1_000_000
"""Keys of one cluster slot read at most (a slot holds a few sessions' keys)."""


def store_of(key: str) -> str:
    """The store a key of the session belongs to (by its kind, the name's second part)."""
    parts = key.split(":", 2)
    return _KIND_STORE.get(parts[1], "other") if len(parts) > 1 else "other"


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


async def session_keys(redis: aioredis.Redis, sid: str) -> list[str]:
    """Every key that carries the session's hash tag. One server: a SCAN of the keyspace
    matching the tag (O(keys), once per delete); a Redis Cluster: the keys of the session's
    one slot, from the master that holds it, those with the tag."""
    tag = keys.session_tag(sid)
    if is_cluster(redis):
        slot = key_slot(keys.session_state(sid).encode())
        in_slot = await redis.cluster_get_keys_in_slot(slot, SLOT_KEYS_MAX)  # type: ignore[attr-defined]
        return sorted({name for name in map(_text, in_slot) if tag in name})
    found = {_text(k) async for k in redis.scan_iter(match=keys.session_key_pattern(sid), count=1000)}
    return sorted(found)


def blob_refs(raw: bytes) -> set[str]:
    """The sha256 of every reference block (blobs.py) written in `raw`."""
    return {m.decode() for m in _REF.findall(raw)}


async def _values(redis: aioredis.Redis, names: list[str]) -> list[tuple[str, str, list[bytes]]]:
    """(key, type, its values as bytes) of each key: what a key holds, to count its records
    and find the content it refers to."""
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
    types = [_text(t) for t in await pipe.execute()]
    pipe = redis.pipeline(transaction=False)
    for name, kind in zip(names, types, strict=True):
        if kind == "string":
            pipe.get(name)
        elif kind == "list":
            pipe.lrange(name, 0, -1)
        elif kind == "hash":
            pipe.hvals(name)
        elif kind == "set":
            pipe.smembers(name)
        elif kind == "zset":
            pipe.zrange(name, 0, -1)
        elif kind == "stream":
            pipe.xrange(name)
        else:
            pipe.exists(name)
    out: list[tuple[str, str, list[bytes]]] = []
    for name, kind, reply in zip(names, types, await pipe.execute(), strict=True):
        if kind == "string":
            values = [reply] if reply is not None else []
        elif kind == "stream":
            values = [v for _id, fields in reply or [] for v in fields.values()]
        elif kind in ("list", "hash", "set", "zset"):
            values = list(reply or [])
        else:
            values = []
        out.append((name, kind, [v if isinstance(v, bytes) else str(v).encode() for v in values]))
    return out


def records(kind: str, values: list[bytes]) -> int:
    """How many records a key counts as: a list's messages, a stream's entries, a set's
    members; one for a string or a hash (a state, a record, a counter)."""
    return len(values) if kind in ("list", "stream", "set", "zset") else 1


class SessionKeys:
    """What the session's own keys hold, read before they are deleted."""

    def __init__(self, found: list[tuple[str, str, list[bytes]]]) -> None:
        self.found = found

    @classmethod
    async def read(
        cls, redis: aioredis.Redis, sid: str, *, keep: frozenset[str] = frozenset()
    ) -> SessionKeys:
        names = [n for n in await session_keys(redis, sid) if n not in keep]
        found: list[tuple[str, str, list[bytes]]] = []
        for i in range(0, len(names), _BATCH):
            found += await _values(redis, names[i : i + _BATCH])
        return cls(found)

    def blobs(self) -> set[str]:
        return {d for _name, _kind, values in self.found for v in values for d in blob_refs(v)}

    def user_ids(self) -> set[str]:
        return {
            _text(v) for name, _kind, values in self.found if store_of(name) == "user_index" for v in values
        }

    def notes(self) -> list[bytes]:
        """The session's observations and reflections, as its memory stored them (a strategy
        actor's list holds the same bytes)."""
        return [
            v
            for name, kind, values in self.found
            if kind == "list" and store_of(name) == "memory" and name.rsplit(":", 1)[-1] in ("obs", "refl")
            for v in values
        ]

    async def delete(self, redis: aioredis.Redis, *, last: str) -> Counter[str]:
        """Delete them all, `last` (the tombstone) after the others; what each held."""
        counts: Counter[str] = Counter()
        names = [name for name, _kind, _values in self.found if name != last]
        for i in range(0, len(names), _BATCH):
            await redis.delete(*names[i : i + _BATCH])  # one slot: the session's
        await redis.delete(last)
        for name, kind, values in self.found:
            counts[store_of(name)] += records(kind, values)
        return counts


async def remove_index_entries(
    redis: aioredis.Redis, sid: str, *, user_ids: set[str], source: str | None
) -> Counter[str]:
    """The session out of the indexes that span sessions (each its own slot: one command each)."""
    counts: Counter[str] = Counter()
    tenant = sid.rpartition(".")[0] or None
    counts["indexes"] += int(await redis.zrem(keys.sessions_index(sid), sid))
    counts["indexes"] += int(await redis.zrem(keys.RUNNING, sid))
    if source is not None:
        counts["indexes"] += int(await redis.zrem(keys.session_forks(source), sid))
    for user in sorted(user_ids):
        counts["user_index"] += int(await redis.srem(keys.user_sessions(tenant, user), sid))
    return counts


async def remove_actor_notes(redis: aioredis.Redis, notes: list[bytes]) -> int:
    """The copies of the session's notes in every strategy actor's list."""
    if not notes:
        return 0
    removed = 0
    async for name in redis.scan_iter(match=keys.ACTOR_MEMORY_PATTERN, count=1000):
        for note in set(notes):
            removed += int(await redis.lrem(_text(name), 0, note))  # type: ignore[arg-type]
    return removed


async def lineage_blobs(redis: aioredis.Redis, related: list[str]) -> set[str]:
    """The blobs the histories of `related` sessions (a source, forks) refer to: shared, kept."""
    kept: set[str] = set()
    for other in related:
        for raw in await redis.lrange(keys.session_history(other), 0, -1):
            kept |= blob_refs(raw if isinstance(raw, bytes) else str(raw).encode())
    return kept


async def remove_blobs(redis: aioredis.Redis, digests: set[str]) -> int:
    removed = 0
    for digest in sorted(digests):  # each blob its own slot
        removed += int(await redis.delete(keys.blob(digest)))
    return removed


async def purge_subject(js: JetStreamContext, stream: str, subject: str) -> int:
    """Remove every message of `stream` on `subject` (a filter): how many were removed."""
    reply: dict[str, Any] = await js._api_request(  # nats-py's purge_stream drops the count
        f"{js._prefix}.STREAM.PURGE.{stream}", orjson.dumps({"filter": subject}), timeout=js._timeout
    )
    return int(reply.get("purged", 0))


async def purge_session_messages(js: JetStreamContext, subjects: Subjects, sid: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    prefix = subjects.prefix
    counts["events_stream"] += await purge_subject(
        js, stream_name(prefix, EVENTS_STREAM), subjects.session_events(sid)
    )
    counts["ingress_stream"] += await purge_subject(
        js, stream_name(prefix, INGRESS_STREAM), subjects.ingress(sid, "*")
    )
    return counts


def receipt(counts: Counter[str]) -> list[StoreRemoved]:
    """The reply's `stores`: every store, in STORES order, with what was removed from it."""
    extra = sorted(set(counts) - set(STORES))
    return [{"store": store, "removed": counts.get(store, 0)} for store in (*STORES, *extra)]
