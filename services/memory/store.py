"""The memory service's Redis state: compactions, observations, reflections, and the
tokens it spent that the run's budget has yet to count.

| key (shared/contract/keys.py) | type | content |
|---|---|---|
| `memory(sid, "compaction")` | string | the session's CompactionRecord (JSON) |
| `memory(sid, "obs")` / `"refl"` | list | observations / reflections (JSON), oldest first |
| `memory(sid, "meta")` | hash | `observed_to` (history index), `reflected` (observations reflected on) |
| `memory_lock(sid, what)` | string + TTL | one replica writes an observation at a time |
| `memory(sid, "usage")` | hash | tokens spent (summaries, observations), not yet claimed |
| `memory_step_usage(sid, step_id)` | hash + TTL | the usage a generation step claimed (its `extra_usage`) |
| `actor_memory(actor, "obs")` / `"refl"` | list | the same, per strategy actor, across sessions (capped) |

Session keys expire with `session_ttl_s` (refreshed on each write), claims with
`step_result_ttl_s`. The full history is never here: it is the router's (keys.session_history).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeGuard

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import NoScriptError

from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import Message
from loopwire.shared.stores.script_channel import ScriptChannel, run_script
from loopwire.shared.stores.session_store import PipelinedHistory

from .compaction import CompactionRecord

log = logging.getLogger("loopwire.memory.store")

ACTOR_KEEP = 200
"""Entries kept per actor list (newest)."""
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

# Claim the pending usage for one step, once: a redelivered step gets the same claim.
_CLAIM_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then return redis.call('HGETALL', KEYS[2]) end
local vals = redis.call('HGETALL', KEYS[1])
if #vals > 0 then
  redis.call('HSET', KEYS[2], unpack(vals))
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[2], 'none', '1')
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return vals
"""

# One observation or reflection (ARGV[1], appended to KEYS[1]), the progress mark it moves
# (ARGV[2] = ARGV[3] in the meta hash KEYS[2]) and the tokens it cost (ARGV[5..], pairs of
# a usage field and its count, added to KEYS[3]), with the keys' expiry (ARGV[4] seconds,
# 0: none): all or nothing. Returns what the observer reads next: the meta hash's
# observed_to and reflected, and the length of the observations' list KEYS[4].
_NOTE_LUA = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
for i = 5, #ARGV, 2 do redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]) end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
end
local meta = redis.call('HMGET', KEYS[2], 'observed_to', 'reflected')
return {meta[1] or false, redis.call('LLEN', KEYS[4]), meta[2] or false}
"""

# A lock's release by its owner only (ARGV[1]): a lock that expired and was taken by
# another replica stays theirs.
_UNLOCK_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _usage_from(flat: list[Any]) -> Usage | None:
    values: dict[str, int] = {}
    for name, value in zip(flat[::2], flat[1::2], strict=True):
        key = name.decode() if isinstance(name, bytes) else str(name)
        if key in USAGE_FIELDS:
            values[key] = int(value)
    usage = Usage(**values)
    return usage if any(values.values()) else None


class Note(TypedDict, total=False):
    """One observation or reflection, as stored (JSON, one list item) and shown in the
    memory section: `text` and where it came from; an observation's span of the history
    (`from_message`, `to_message`, its model `turns`), a reflection's count of the
    `observations` it read."""

    text: str
    session_id: str
    run_id: str
    actor: str | None
    at: str
    from_message: int
    to_message: int
    turns: int
    observations: int


def _is_note(value: object) -> TypeGuard[Note]:
    return isinstance(value, dict)


@dataclass
class Snapshot:
    """What one assembly reads besides the history, in one round trip."""

    record: CompactionRecord | None = None
    observations: list[Note] = field(default_factory=list)
    reflections: list[Note] = field(default_factory=list)
    actor_observations: list[Note] = field(default_factory=list)
    actor_reflections: list[Note] = field(default_factory=list)
    history: list[list[Message]] = field(default_factory=list)
    """The history ranges asked for, read in the same round trip."""
    claimed: Usage | None = None
    """With `claim_for`: the tokens spent since the last claim, claimed for that step."""


@dataclass
class ObservationState:
    observed_to: int = 0
    """History index up to which observations were written."""
    observations: int = 0
    reflected: int = 0
    """Observations already reflected on."""

    @classmethod
    def read(cls, observed_to: bytes | None, count: int, reflected: bytes | None) -> ObservationState:
        """From Redis replies: the meta hash's fields (None when unset) and the list's length."""
        return cls(int(observed_to or 0), int(count), int(reflected or 0))


class MemoryStore:
    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0, claim_ttl_s: int = 7 * 24 * 3600,
                 *, channel: ScriptChannel | None = None) -> None:
        self._r = redis
        self._ttl = ttl_s
        self._claim_ttl = claim_ttl_s
        self._claim = redis.register_script(_CLAIM_LUA)
        self._note = redis.register_script(_NOTE_LUA)
        self._unlock = redis.register_script(_UNLOCK_LUA)
        # The reads of every generation (snapshot, observation_state) go out together on the
        # process's pipelined connection (`channel`, the step records' own) where Redis is
        # one server over TCP (shared/stores/script_channel.py), else as a redis-py pipeline.
        self._channel = channel if channel is not None else ScriptChannel.of(redis)

    def _reads(self) -> Any:
        return self._channel.batch() if self._channel is not None else self._r.pipeline(transaction=False)

    # -- reading --------------------------------------------------------------------------------
    async def snapshot(self, sid: str, actor: str | None, observations: int, *, reflections: int,
                       history: list[tuple[int, int]] | None = None, claim_for: str | None = None,
                       history_reader: PipelinedHistory | None = None,
                       decode: Callable[[list[bytes]], list[Message]] = PipelinedHistory.messages) -> Snapshot:
        """The session's memory, and the history ranges [start, stop] in `history` (read
        by `history_reader`, the router's session store's reader of the history on this
        Redis: capability PIPELINED_HISTORY) in the same trip, their replies decoded by
        `decode` (history_memo.py); with `claim_for` (a step id) also `claim_usage` for
        that step."""
        if history and history_reader is None:
            raise ValueError("history ranges to read need the history's reader")

        def lists(key: str, count: int) -> Any:
            """The last `count` items of a list (an empty one, not read, for 0)."""
            return (lambda pipe: pipe.lrange(key, -count, -1)) if count > 0 else None

        reads: list[Any] = [
            lambda pipe: pipe.get(keys.memory(sid, "compaction")),
            lists(keys.memory(sid, "obs"), observations), lists(keys.memory(sid, "refl"), reflections)]
        if actor:
            reads += [lists(keys.actor_memory(actor, "obs"), observations),
                      lists(keys.actor_memory(actor, "refl"), reflections)]
        if history_reader is not None:
            reads += [(lambda pipe, start=start, stop=stop: history_reader.queue(pipe, start, stop))
                      for start, stop in history or []]

        def pipeline() -> Any:
            pipe = self._reads()
            for read in reads:
                if read is not None:
                    read(pipe)
            # A session in use keeps its memory as long as the router keeps its state.
            self._expire(pipe, *(keys.memory(sid, what) for what in ("compaction", "obs", "refl", "meta")))
            if claim_for is not None:
                # EVALSHA as a plain command: a Script object in a pipeline costs a SCRIPT
                # EXISTS round trip per execute (and a cluster pipeline refuses the method).
                # NOSCRIPT (a restarted Redis) is handled below.
                pipe.execute_command("EVALSHA", self._claim.sha, 2, *self._claim_keys(sid, claim_for),
                                     str(self._claim_ttl))
            return pipe

        try:
            replies = await pipeline().execute()
        except NoScriptError:
            await self._r.script_load(_CLAIM_LUA)
            replies = await pipeline().execute()  # reads, and a claim that is idempotent per step
        given = iter(replies)
        raw = [[] if read is None else next(given) for read in reads]
        snap = Snapshot(record=self._record(raw[0]), observations=_items(raw[1]), reflections=_items(raw[2]))
        if actor:
            # The actor's memory from its other sessions (this session's is listed already).
            snap.actor_observations = [o for o in _items(raw[3]) if o.get("session_id") != sid]
            snap.actor_reflections = [r for r in _items(raw[4]) if r.get("session_id") != sid]
        first = 5 if actor else 3
        snap.history = [decode(part) for part in raw[first:first + len(history or [])]]
        if claim_for is not None:
            snap.claimed = _usage_from(replies[-1])
        return snap

    @staticmethod
    def _record(raw: bytes | None) -> CompactionRecord | None:
        if raw is None:
            return None
        try:
            return CompactionRecord.model_validate(codec.loads(raw))
        except (ValidationError, ValueError) as exc:  # written by another version: start over
            log.warning("unreadable compaction record ignored: %s", exc)
            return None

    async def observation_state(self, sid: str) -> ObservationState:
        pipe = self._reads()
        self._queue_state(pipe, sid)
        (observed_to, reflected), count = await pipe.execute()
        return ObservationState.read(observed_to, count, reflected)

    async def begin_observation(self, sid: str, owner: str, *, ttl_s: int,
                                recent: int) -> tuple[bool, ObservationState, list[Note]]:
        """The session's observation lock taken for `owner` (False: another replica holds
        it), the observation state and the last `recent` observations, in one round trip
        (read whether or not the lock was taken: nothing to undo)."""
        pipe = self._reads()
        pipe.execute_command("SET", keys.memory_lock(sid, "observe"), owner, "NX", "EX", ttl_s)
        self._queue_state(pipe, sid)
        pipe.lrange(keys.memory(sid, "obs"), -recent, -1)
        taken, (observed_to, reflected), count, earlier = await pipe.execute()
        return bool(taken), ObservationState.read(observed_to, count, reflected), _items(earlier)

    @staticmethod
    def _queue_state(pipe: Any, sid: str) -> None:
        pipe.hmget(keys.memory(sid, "meta"), ["observed_to", "reflected"])
        pipe.llen(keys.memory(sid, "obs"))

    async def observations(self, sid: str, start: int = 0, stop: int = -1) -> list[Note]:
        (raw,) = await self._reads().lrange(keys.memory(sid, "obs"), start, stop).execute()
        return _items(raw)

    async def reflections(self, sid: str) -> list[Note]:
        return _items(await self._r.lrange(keys.memory(sid, "refl"), 0, -1))

    # -- writing --------------------------------------------------------------------------------
    async def save_compaction(self, sid: str, record: CompactionRecord) -> None:
        """The record and the tokens it cost, in one transaction: a redelivered step never
        counts a stored summary twice, nor loses its cost."""
        pipe = self._r.pipeline(transaction=True)
        pipe.set(keys.memory(sid, "compaction"), codec.dumps(record), ex=self._ttl or None)
        self._add_usage(pipe, sid, record.usage)
        await pipe.execute()

    async def add_observation(self, sid: str, item: Note, actor: str | None, *, usage: Usage,
                              observed_to: int) -> ObservationState:
        return await self._add_note(sid, "obs", item, actor=actor, usage=usage, progress_field="observed_to",
                                    progress=observed_to)

    async def add_reflection(self, sid: str, item: Note, actor: str | None, *, usage: Usage,
                             reflected: int) -> ObservationState:
        return await self._add_note(sid, "refl", item, actor=actor, usage=usage, progress_field="reflected",
                                    progress=reflected)

    async def _add_note(self, sid: str, kind: str, item: Note, *, actor: str | None, usage: Usage,
                        progress_field: str, progress: int) -> ObservationState:
        """One observation or reflection, the progress mark it moves and the tokens it
        cost, in one script of the session's slot (the observation state after it is its
        answer); then its copy in the strategy actor's list, when there is one (another
        slot on a Redis Cluster: a crash between the two leaves the actor's list without
        that note, never with it twice)."""
        data = codec.dumps(item)
        counted = [part for name in USAGE_FIELDS if (value := getattr(usage, name)) for part in (name, value)]
        observed_to, count, reflected = await run_script(
            self._channel, self._r, self._note, keys=[keys.memory(sid, kind), keys.memory(sid, "meta"), keys.memory(sid, "usage"),
                         keys.memory(sid, "obs")],
            args=[data, progress_field, progress, self._ttl, *counted])
        if actor:
            pipe = self._r.pipeline(transaction=True)
            pipe.rpush(keys.actor_memory(actor, kind), data)
            pipe.ltrim(keys.actor_memory(actor, kind), -ACTOR_KEEP, -1)
            self._expire(pipe, keys.actor_memory(actor, kind))
            await pipe.execute()
        return ObservationState.read(observed_to, count, reflected)

    async def mark_observed(self, sid: str, observed_to: int) -> None:
        await self._r.hset(keys.memory(sid, "meta"), "observed_to", observed_to)

    async def mark_reflected(self, sid: str, reflected: int) -> None:
        await self._r.hset(keys.memory(sid, "meta"), "reflected", reflected)

    async def unlock(self, sid: str, what: str, owner: str) -> None:
        await run_script(self._channel, self._r, self._unlock, keys=[keys.memory_lock(sid, what)], args=[owner])

    # -- the usage ledger -------------------------------------------------------------------------
    async def add_usage(self, sid: str, usage: Usage) -> None:
        pipe = self._r.pipeline(transaction=False)
        self._add_usage(pipe, sid, usage)
        await pipe.execute()

    async def claim_usage(self, sid: str, step_id: str) -> Usage | None:
        """The tokens spent since the last claim, handed to generation `step_id` (once:
        a redelivery of the step gets the same answer)."""
        flat = await self._claim(keys=self._claim_keys(sid, step_id), args=[str(self._claim_ttl)])
        return _usage_from(flat)

    @staticmethod
    def _claim_keys(sid: str, step_id: str) -> list[str]:
        return [keys.memory(sid, "usage"), keys.memory_step_usage(sid, step_id)]

    def _add_usage(self, pipe: Any, sid: str, usage: Usage) -> None:
        key = keys.memory(sid, "usage")
        for name in USAGE_FIELDS:
            value = getattr(usage, name)
            if value:
                pipe.hincrby(key, name, value)
        self._expire(pipe, key)

    def _expire(self, pipe: Any, *keys: str) -> None:
        if self._ttl:
            for key in keys:
                pipe.expire(key, self._ttl)


def _items(raw: Any) -> list[Note]:
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw:
        try:
            value = codec.loads(item)
        except ValueError:
            continue
        if _is_note(value):
            out.append(value)
    return out
