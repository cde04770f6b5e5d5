"""Session state behind a compare-and-set on a version, plus the session's message history.

One Protocol, two backends (in-memory for unit tests, Redis for everything else), one
conformance suite (loopwire.testing.store_conformance) that both pass, with the Redis one's
optional capabilities (capabilities.py).

State is an opaque JSON document owned by the router; the history is an append-only list
of Anthropic-format messages. A commit writes both at once: in Redis one Lua script checks
the version, replaces the state and appends the messages, so two router replicas can never
both advance one session, and the history can never run ahead of the state that counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis

from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import Message
from loopwire.shared.stores.capabilities import Capability, Declares, Store, Unsupported
from loopwire.shared.stores.event_log import (
    APPEND_EVENTS_LUA,
    Append,
    appended_events,
    event_args,
    event_keys,
)
from loopwire.shared.stores.redis_connection import OUTAGE_ERRORS, is_cluster
from loopwire.shared.stores.replication import Replication, ScriptCall


class SessionStore(Store, Protocol):
    async def load(self, sid: str) -> tuple[dict[str, Any] | None, int]:
        """The session's state and version (None, 0 when the session is new)."""
        ...

    async def commit(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                     *, history_len_before: int, append: list[Message]) -> bool:
        """Write `state` as version expected_version+1 and append `append` to the history,
        truncated first to `history_len_before` messages; False when the version moved."""
        ...

    async def history(self, sid: str, start: int = 0, stop: int = -1) -> list[Message]:
        """History messages [start, stop] (inclusive, like LRANGE)."""
        ...

    async def delete(self, sid: str) -> None: ...

    async def recently_updated(self, index: str, after: tuple[int, str] | None,
                               count: int) -> list[tuple[str, int]]:
        """Up to `count` (sid, updated ms) of sessions index `index` (keys.sessions_index),
        most recently updated first (ties: greater sid first), those that come after
        `after` in that order."""
        ...

    async def load_many(self, sids: list[str]) -> list[dict[str, Any] | None]:
        """The states of `sids` (None for a session that has none), in one round trip."""
        ...

    async def commit_with_events(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                                 *, history_len_before: int, append: list[Message],
                                 events: list[Append]) -> list[tuple[AnyEvent, bool]] | None:
        """Capability COMMIT_WITH_EVENTS: `commit`, and `append_many(sid, events)` of the
        backend's event log, at once. The events as appended; None when the version moved
        (nothing written)."""
        ...

    def pipelined_history(self, sid: str) -> PipelinedHistory:
        """Capability PIPELINED_HISTORY: the reader of the session's history that another
        Redis store queues in its own pipeline."""
        ...

    async def add_fork(self, sid: str, fork: str) -> None:
        """List `fork` among the sessions forked from `sid` (once; kept with `sid`)."""
        ...

    async def forks(self, sid: str) -> list[str]:
        """The sessions listed as forked from `sid`, in the order they were listed. A fork
        is listed before it is made (services/router/shell/fork.py): one never made stays
        listed, so a reader keeps those that exist."""
        ...


@dataclass(frozen=True)
class PipelinedHistory:
    """Reads of one session's history queued in another store's Redis pipeline (capability
    PIPELINED_HISTORY), and their replies decoded: what the history is stored as stays this
    module's."""

    key: str

    def queue(self, pipe: Any, start: int, stop: int) -> None:
        """Messages [start, stop] (inclusive, like `SessionStore.history`), read by `pipe`."""
        pipe.lrange(self.key, start, stop)

    @staticmethod
    def messages(reply: list[bytes]) -> list[Message]:
        """The messages of one queued read's reply."""
        return [codec.loads(m) for m in reply]


def comes_after(entry: tuple[int, str], after: tuple[int, str] | None) -> bool:
    """Whether (ms, sid) follows `after` in most-recent-first order."""
    return after is None or entry[0] < after[0] or (entry[0] == after[0] and entry[1] < after[1])


@dataclass
class InMemorySessionStore(Declares):
    states: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    histories: dict[str, list[bytes]] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    """Update time (ms) of each session, for the sessions index."""
    fork_lists: dict[str, list[str]] = field(default_factory=dict)

    async def load(self, sid: str) -> tuple[dict[str, Any] | None, int]:
        if sid not in self.states:
            return None, 0
        version, raw = self.states[sid]
        return codec.loads(raw), version

    async def commit(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                     *, history_len_before: int, append: list[Message]) -> bool:
        current = self.states.get(sid, (0, b""))[0]
        if current != expected_version:
            return False
        self.states[sid] = (expected_version + 1, _encoded(state))
        self.updated[sid] = max(int(time.time() * 1000), self.updated.get(sid, 0))
        hist = self.histories.setdefault(sid, [])
        del hist[history_len_before:]
        hist.extend(codec.dumps(m) for m in append)
        return True

    async def history(self, sid: str, start: int = 0, stop: int = -1) -> list[Message]:
        hist = self.histories.get(sid, [])
        end = len(hist) if stop == -1 else stop + 1
        return [codec.loads(m) for m in hist[start:end]]

    async def delete(self, sid: str) -> None:
        self.states.pop(sid, None)
        self.histories.pop(sid, None)
        self.updated.pop(sid, None)

    async def recently_updated(self, index: str, after: tuple[int, str] | None,
                               count: int) -> list[tuple[str, int]]:
        listed = sorted(((ms, sid) for sid, ms in self.updated.items() if keys.sessions_index(sid) == index),
                        reverse=True)
        return [(sid, ms) for ms, sid in listed if comes_after((ms, sid), after)][:count]

    async def load_many(self, sids: list[str]) -> list[dict[str, Any] | None]:
        return [(await self.load(sid))[0] for sid in sids]

    async def commit_with_events(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                                 *, history_len_before: int, append: list[Message],
                                 events: list[Append]) -> list[tuple[AnyEvent, bool]] | None:
        raise Unsupported("the in-memory session store commits no events: commit, then append_many")

    def pipelined_history(self, sid: str) -> PipelinedHistory:
        raise Unsupported("the in-memory session store keeps its histories in this process")

    async def add_fork(self, sid: str, fork: str) -> None:
        listed = self.fork_lists.setdefault(sid, [])
        if fork not in listed:
            listed.append(fork)

    async def forks(self, sid: str) -> list[str]:
        return list(self.fork_lists.get(sid, []))


_MARK_UPDATED_LUA = """
local function mark_updated(index_key, sid, ttl)
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZADD', index_key, now_ms, sid)
  if ttl > 0 then
    redis.call('ZREMRANGEBYSCORE', index_key, '-inf', '(' .. (now_ms - ttl * 1000))
    redis.call('EXPIRE', index_key, ttl)
  end
end
"""
"""Mark session `sid` updated now in a sessions index (Redis's own clock, so replicas
agree); entries older than the TTL leave it, and the index itself expires a TTL after the
last commit of any of its sessions."""

_INDEX_LUA = _MARK_UPDATED_LUA + """
mark_updated(KEYS[1], ARGV[1], tonumber(ARGV[2]))
return 1
"""
"""The index's own script, on a Redis Cluster: the index is in a slot of its own."""

_COMMIT_LUA = APPEND_EVENTS_LUA + _MARK_UPDATED_LUA + """
local cur = redis.call('HGET', KEYS[1], 'ver')
if (cur or '0') ~= ARGV[1] then return false end
redis.call('HSET', KEYS[1], 'ver', ARGV[2], 'state', ARGV[3])
local keep = tonumber(ARGV[4])
if keep == 0 then
  redis.call('DEL', KEYS[2])
else
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
end
local n = tonumber(ARGV[6])
if n > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 8, 7 + n))
end
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
if KEYS[6] then mark_updated(KEYS[6], ARGV[7], ttl) end
return append_events(KEYS[3], KEYS[4], KEYS[5], ttl, ARGV, 8 + n)
"""
"""The commit: compare the version, write the state, trim the history to the length the
old state counted, append the new messages (ARGV[6] of them, from ARGV[8]), mark the
session (ARGV[7]) updated in the sessions index (KEYS[6]; on a Redis Cluster the index
is another slot's, and `_INDEX_LUA` marks it in the same round trip), then append the
events that follow them (event_log.APPEND_EVENTS_LUA). nil when the version moved:
nothing is written."""


async def _best_effort(write: Awaitable[Any]) -> None:
    with contextlib.suppress(*OUTAGE_ERRORS):
        await write


_ADD_FORK_LUA = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], redis.call('ZCARD', KEYS[1]), ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
"""A fork listed once among its source's, scored by its place in the list (the order
they were listed, without two of one millisecond tying)."""


def _encoded(state: dict[str, Any] | bytes) -> bytes:
    """A state may come encoded already (the router serialises its model straight to JSON)."""
    return state if isinstance(state, bytes) else codec.dumps(state)


class RedisSessionStore(Declares):
    """keys.session_state hash {ver, state}; keys.session_history list of message JSON;
    keys.sessions_index sorted set of session ids by update time (the sessions list query);
    keys.session_forks sorted set of the sessions forked from it, by the order they were listed."""

    capabilities = frozenset({Capability.COMMIT_WITH_EVENTS, Capability.PIPELINED_HISTORY})

    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0, replication: Replication | None = None) -> None:
        """`replication`: commits wait for the master's replicas (replication.py)."""
        self._r = redis
        self._ttl = ttl_s
        self._commit = redis.register_script(_COMMIT_LUA)
        self._add_fork = redis.register_script(_ADD_FORK_LUA)
        self._index = redis.register_script(_INDEX_LUA)
        self._rep = replication or Replication(redis)
        self._index_apart = is_cluster(redis)

    async def load(self, sid: str) -> tuple[dict[str, Any] | None, int]:
        ver, raw = await self._r.hmget(keys.session_state(sid), ["ver", "state"])
        if ver is None or raw is None:
            return None, 0
        return codec.loads(raw), int(ver)

    async def commit(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                     *, history_len_before: int, append: list[Message]) -> bool:
        return await self.commit_with_events(sid, expected_version, state, history_len_before=history_len_before, append=append, events=[]) is not None

    async def commit_with_events(self, sid: str, expected_version: int, state: dict[str, Any] | bytes,
                                 *, history_len_before: int, append: list[Message],
                                 events: list[Append]) -> list[tuple[AnyEvent, bool]] | None:
        """`commit`, and `RedisEventLog.append_many(sid, events)` in the same script: the
        events of a transition are stored (their seqs assigned) exactly when its state is,
        in one round trip. None when the version moved (nothing written); the same TTL."""
        stripped, event_argv = event_args(events)
        args: list[Any] = [str(expected_version), str(expected_version + 1), _encoded(state),
                           str(history_len_before), str(self._ttl), str(len(append)), sid]
        args.extend(codec.dumps(m) for m in append)
        args.extend(event_argv)
        names = [keys.session_state(sid), keys.session_history(sid), *event_keys(sid)]
        if not self._index_apart:
            flat = await self._rep.run(ScriptCall(self._commit, [*names, keys.sessions_index(sid)], args))
        else:
            # The index is another slot's: marked beside the commit, at the same time. A
            # mark that fails (its master away) leaves the session's place in the list as
            # it was until its next commit; the commit stands either way.
            flat, _ = await asyncio.gather(
                self._rep.run(ScriptCall(self._commit, names, args)),
                _best_effort(self._index(keys=[keys.sessions_index(sid)], args=[sid, str(self._ttl)])))
        if flat is None:
            return None
        return appended_events(stripped, flat)

    def pipelined_history(self, sid: str) -> PipelinedHistory:
        return PipelinedHistory(keys.session_history(sid))

    async def history(self, sid: str, start: int = 0, stop: int = -1) -> list[Message]:
        raw = await self._r.lrange(keys.session_history(sid), start, stop)
        return [codec.loads(m) for m in raw]

    async def delete(self, sid: str) -> None:
        await self._r.delete(keys.session_state(sid), keys.session_history(sid))
        await self._r.zrem(keys.sessions_index(sid), sid)

    async def recently_updated(self, index: str, after: tuple[int, str] | None,
                               count: int) -> list[tuple[str, int]]:
        # ZREVRANGEBYSCORE from the cursor's time (inclusive), skipping the entries of
        # that same millisecond that were on the previous page.
        top = str(after[0]) if after else "+inf"
        out: list[tuple[str, int]] = []
        offset = 0
        while len(out) < count:
            rows: list[tuple[bytes, float]] = await self._r.zrevrangebyscore(  # type: ignore[assignment]
                index, top, "-inf", start=offset, num=count + 16, withscores=True)
            if not rows:
                break
            offset += len(rows)
            for member, score in rows:
                entry = (int(score), member.decode())
                if comes_after(entry, after):
                    out.append((entry[1], entry[0]))
        return out[:count]

    async def load_many(self, sids: list[str]) -> list[dict[str, Any] | None]:
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            pipe.hget(keys.session_state(sid), "state")
        return [codec.loads(raw) if raw is not None else None for raw in await pipe.execute()]

    async def add_fork(self, sid: str, fork: str) -> None:
        await self._add_fork(keys=[keys.session_forks(sid)], args=[fork, str(self._ttl)])

    async def forks(self, sid: str) -> list[str]:
        return [m.decode() if isinstance(m, bytes) else str(m) for m in await self._r.zrange(keys.session_forks(sid), 0, -1)]
