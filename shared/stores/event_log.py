"""The per-session event log: `seq` assignment, storage and idempotent re-emission.

Every event gets its `seq` from one counter per session (keys.event_seq), assigned in
the same Lua script that stores it, so seqs are strictly increasing, never reused (also
across restarts) and the stored order is the seq order, whichever service emits.

An event emitted with a dedup key (`<step_id>:<what>`) is stored once: a step that is
redelivered after a crash re-emits its events with the same keys and gets the original
seq and body back, so the transcript never shows an event twice. `text.delta` events are
ephemeral: they take a seq but are not stored (they stay in the LOOPWIRE_EVENTS stream).

`append_many` does the same for the events of one router transition in one round trip
(one Lua call), as if they were appended one after the other.

Redis layout (shared/contract/keys.py): keys.event_seq counter, keys.event_dedup hash
key -> seq, keys.event_stream stream whose entry ids are `<seq>-0` and whose field `e` is
the event body without its seq.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis.asyncio as aioredis

from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.stores.capabilities import Capability, Declares, Store, Unsupported
from loopwire.shared.stores.replication import Replication, ScriptCall

Append = tuple[AnyEvent, str | None, bool]
"""One event to append: (body, dedup key or None, store it)."""


def with_seq(body: Mapping[str, Any], seq: int) -> AnyEvent:
    """Put `seq` back in its place among the common fields: an event again (the body an
    emitter made, or its JSON read back from the log)."""
    out: dict[str, Any] = {}
    for k, v in body.items():
        if k == "seq":
            continue
        out[k] = v
        if k == "run_id":
            out["seq"] = seq
    out.setdefault("seq", seq)
    return cast(AnyEvent, out)


class EventLogStore(Store, Protocol):
    async def append(self, sid: str, body: AnyEvent, key: str | None,
                     *, store: bool = True) -> tuple[AnyEvent, bool]:
        """Assign a seq and store `body`; returns (event with seq, newly appended).
        With a key seen before, returns the original event and False."""
        ...

    async def append_many(self, sid: str, items: list[Append]) -> list[tuple[AnyEvent, bool]]:
        """`append` of each item in order, in one step."""
        ...

    async def read(self, sid: str, after_seq: int = 0, limit: int = 1000) -> list[AnyEvent]: ...

    async def last_seq(self, sid: str) -> int: ...

    async def delete(self, sid: str) -> None: ...

    async def restore(self, sid: str, events: list[AnyEvent]) -> bool:
        """Put back the events of a session whose log is empty (read from the events
        stream, event_archive.py), with their own seqs; the counter goes on from the
        highest, so no seq is ever reused. False (nothing written) when the log is not
        empty or its counter is already past them."""
        ...

    async def raise_seq(self, sid: str, floor: int) -> None:
        """Capability SEQ_FLOOR: make the session's next `seq` come after `floor` (the last
        one published, read from LOOPWIRE_EVENTS after the store lost the counter)."""
        ...


@dataclass
class InMemoryEventLog(Declares):
    seqs: dict[str, int] = field(default_factory=dict)
    keys: dict[str, dict[str, int]] = field(default_factory=dict)
    events: dict[str, dict[int, AnyEvent]] = field(default_factory=dict)

    async def append(self, sid: str, body: AnyEvent, key: str | None,
                     *, store: bool = True) -> tuple[AnyEvent, bool]:
        known = self.keys.setdefault(sid, {})
        if key is not None and key in known:
            seq = known[key]
            return self.events[sid].get(seq, with_seq(body, seq)), False
        seq = self.seqs.get(sid, 0) + 1
        self.seqs[sid] = seq
        if key is not None:
            known[key] = seq
        event = with_seq(body, seq)
        if store:
            self.events.setdefault(sid, {})[seq] = event
        return event, True

    async def append_many(self, sid: str, items: list[Append]) -> list[tuple[AnyEvent, bool]]:
        return [await self.append(sid, body, key, store=store) for body, key, store in items]

    async def read(self, sid: str, after_seq: int = 0, limit: int = 1000) -> list[AnyEvent]:
        stored = self.events.get(sid, {})
        return [stored[s] for s in sorted(stored) if s > after_seq][:limit]

    async def last_seq(self, sid: str) -> int:
        return self.seqs.get(sid, 0)

    async def delete(self, sid: str) -> None:
        self.events.pop(sid, None)
        self.keys.pop(sid, None)
        # The counter stays: seqs are never reused.

    async def restore(self, sid: str, events: list[AnyEvent]) -> bool:
        top = max((e["seq"] for e in events), default=0)
        if self.events.get(sid) or self.seqs.get(sid, 0) >= top:
            return False
        self.events[sid] = {e["seq"]: e.copy() for e in events}
        self.seqs[sid] = top
        return True

    async def raise_seq(self, sid: str, floor: int) -> None:
        raise Unsupported("the in-memory event log loses nothing the events stream keeps: no seq floor")


_APPEND_LUA = """
if ARGV[1] ~= '' then
  local s = redis.call('HGET', KEYS[2], ARGV[1])
  if s then
    local e = redis.call('XRANGE', KEYS[3], s .. '-0', s .. '-0')
    local body = ''
    if e[1] then body = e[1][2][2] end
    return {tonumber(s), body, 0}
  end
end
local seq = redis.call('INCR', KEYS[1])
if ARGV[1] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], seq) end
if ARGV[3] == '1' then redis.call('XADD', KEYS[3], seq .. '-0', 'e', ARGV[2]) end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
end
return {seq, '', 1}
"""


APPEND_EVENTS_LUA = """
local function append_events(seq_key, ek_key, e_key, ttl, args, first)
  local out = {}
  local appended = false
  for i = first, #args, 3 do
    local key = args[i]
    local s = false
    if key ~= '' then s = redis.call('HGET', ek_key, key) end
    if s then
      local e = redis.call('XRANGE', e_key, s .. '-0', s .. '-0')
      local body = ''
      if e[1] then body = e[1][2][2] end
      out[#out + 1] = tonumber(s)
      out[#out + 1] = body
      out[#out + 1] = 0
    else
      local seq = redis.call('INCR', seq_key)
      if key ~= '' then redis.call('HSET', ek_key, key, seq) end
      if args[i + 2] == '1' then redis.call('XADD', e_key, seq .. '-0', 'e', args[i + 1]) end
      appended = true
      out[#out + 1] = seq
      out[#out + 1] = ''
      out[#out + 1] = 1
    end
  end
  if appended and ttl > 0 then
    redis.call('EXPIRE', ek_key, ttl)
    redis.call('EXPIRE', e_key, ttl)
  end
  return out
end
"""
"""A Lua function appending events given as (key, body, store) triples of `args` from
index `first` on; shared by `append_many` and the router's commit (session_store.py),
which appends a transition's leading events in the same script as its state."""

_APPEND_MANY_LUA = APPEND_EVENTS_LUA + """
return append_events(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV, 2)
"""


def event_keys(sid: str) -> list[str]:
    """The keys `APPEND_EVENTS_LUA` needs: counter, dedup hash, stream."""
    return [keys.event_seq(sid), keys.event_dedup(sid), keys.event_stream(sid)]


def event_args(items: list[Append]) -> tuple[list[dict[str, Any]], list[str | bytes]]:
    """The bodies without their seq, and the (key, body, store) triples for the script."""
    stripped = [{k: v for k, v in body.items() if k != "seq"} for body, _, _ in items]
    args: list[str | bytes] = []
    for body, (_, key, store) in zip(stripped, items, strict=True):
        args += [key or "", codec.dumps(body), "1" if store else "0"]
    return stripped, args


def appended_events(stripped: list[dict[str, Any]], flat: list[Any]) -> list[tuple[AnyEvent, bool]]:
    """What `append_events` returned, as (event with seq, newly appended) per item."""
    out = []
    for n, body in enumerate(stripped):
        seq, original, new = int(flat[3 * n]), flat[3 * n + 1], flat[3 * n + 2]
        if not new and original:
            out.append((with_seq(codec.loads(original), seq), False))
        else:
            out.append((with_seq(body, seq), bool(new)))
    return out


_RESTORE_LUA = """
local top = tonumber(ARGV[2])
if redis.call('XLEN', KEYS[2]) > 0 or tonumber(redis.call('GET', KEYS[1]) or '0') >= top then
  return 0
end
for i = 3, #ARGV, 2 do
  redis.call('XADD', KEYS[2], ARGV[i] .. '-0', 'e', ARGV[i + 1])
end
redis.call('SET', KEYS[1], top)
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return 1
"""


_RAISE_SEQ_LUA = """
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if cur < floor then
  redis.call('SET', KEYS[1], floor)
  if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2])) end
end
return cur
"""


class RedisEventLog(Declares):
    capabilities = frozenset({Capability.COMMIT_WITH_EVENTS, Capability.SEQ_FLOOR})

    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0, replication: Replication | None = None) -> None:
        """`replication`: a seq is on the master's replicas before the event is
        published (replication.py)."""
        self._r = redis
        self._ttl = ttl_s
        self._rep = replication or Replication(redis)
        self._append = redis.register_script(_APPEND_LUA)
        self._append_many = redis.register_script(_APPEND_MANY_LUA)
        self._restore = redis.register_script(_RESTORE_LUA)
        self._raise_seq = redis.register_script(_RAISE_SEQ_LUA)

    async def append(self, sid: str, body: AnyEvent, key: str | None,
                     *, store: bool = True) -> tuple[AnyEvent, bool]:
        stripped = {k: v for k, v in body.items() if k != "seq"}
        seq, original, new = await self._rep.run(ScriptCall(
            self._append, event_keys(sid), [key or "", codec.dumps(stripped), "1" if store else "0", str(self._ttl)]))
        seq = int(seq)
        if not new and original:
            return with_seq(codec.loads(original), seq), False
        return with_seq(stripped, seq), bool(new)

    async def append_many(self, sid: str, items: list[Append]) -> list[tuple[AnyEvent, bool]]:
        if not items:
            return []
        stripped, args = event_args(items)
        flat = await self._rep.run(ScriptCall(self._append_many, event_keys(sid), [str(self._ttl), *args]))
        return appended_events(stripped, flat)

    async def read(self, sid: str, after_seq: int = 0, limit: int = 1000) -> list[AnyEvent]:
        entries = await self._r.xrange(keys.event_stream(sid), min=f"({after_seq}-0" if after_seq else "-",
                                       max="+", count=limit)
        out: list[AnyEvent] = []
        for entry_id, fields in entries or []:
            # decode_responses is off (shared/stores/redis_connection.py): ids and fields are bytes.
            seq = int(bytes(entry_id).split(b"-")[0])  # type: ignore[arg-type]
            out.append(with_seq(codec.loads(fields[b"e"]), seq))  # type: ignore[index]
        return out

    async def last_seq(self, sid: str) -> int:
        raw = await self._r.get(keys.event_seq(sid))
        return int(raw) if raw else 0

    async def raise_seq(self, sid: str, floor: int) -> None:
        """Make the session's next `seq` come after `floor` (the last one published, read
        from LOOPWIRE_EVENTS after Redis lost the counter): never reused, never from 1."""
        await self._rep.run(ScriptCall(self._raise_seq, [keys.event_seq(sid)], [str(floor), str(self._ttl)]))

    async def delete(self, sid: str) -> None:
        await self._r.delete(keys.event_dedup(sid), keys.event_stream(sid))

    async def restore(self, sid: str, events: list[AnyEvent]) -> bool:
        ordered = sorted(events, key=lambda e: e["seq"])
        if not ordered:
            return False
        args: list[str | bytes] = [str(self._ttl), str(ordered[-1]["seq"])]
        for event in ordered:
            args += [str(event["seq"]), codec.dumps({k: v for k, v in event.items() if k != "seq"})]
        return bool(await self._rep.run(ScriptCall(self._restore, [keys.event_seq(sid), keys.event_stream(sid)], args)))
