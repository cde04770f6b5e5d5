"""Recorded step results, keyed by idempotency key, and the claims that fence them.

The llm service records a model answer under its step (keys.generation_step) before it
publishes it; the tools service records each tool result (keys.tool_call_step). A step's
names carry its session's hash tag, so its claim, fence and records share one slot. A redelivered step
finds its record and is answered without calling the model or the tool again.

A claim fences the side effect itself. Before a worker calls the model or a tool it claims
the step (`claim`: put-if-absent of an owner and a fencing token from a counter, with a
TTL of one AckWait that the worker renews while the call runs) in the same script that
reads the step's records: whatever a delivery is (a first one, a redelivery, one stuck in
a paused process's buffer), it performs nothing that is recorded or claimed by a live
owner. Its result is written only under its own token (`record_claimed`): a worker that
was paused past AckWait while another replica claimed the step finds its claim gone and
writes and publishes nothing. A claim whose owner died expires, and the step is claimed
again (the call was not recorded, so it is made again, with the same idempotency key).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis

from loopwire.shared.contract import codec, keys
from loopwire.shared.stores.capabilities import Declares, Store
from loopwire.shared.stores.redis_connection import OUTAGE_ERRORS
from loopwire.shared.stores.replication import Replication, ScriptCall

__all__ = ["InMemoryStepStore", "RedisStepStore", "StepHeld", "StepStore", "renewed"]


class StepHeld(Exception):
    """Another live worker holds the step's claim (or took it over from this one): this
    delivery performs nothing and is retried later, when the step is recorded or the
    claim expired (shared/runtime/redelivery.py treats it as transient)."""


@dataclass(frozen=True)
class Claim:
    records: list[dict[str, Any] | None]
    """The step's records, in the order of the keys asked for."""
    token: str | None
    """`<owner>|<fencing token>` when this worker now holds the claim; None when every
    record is there (nothing to perform, nothing claimed)."""

    @property
    def attempt(self) -> int:
        """Which claim of the step this is (its fencing token: 1 for the first; more when
        an earlier attempt claimed it and recorded nothing); 0 when nothing was claimed."""
        if self.token is None:
            return 0
        try:
            return int(self.token.rpartition("|")[2])
        except ValueError:
            return 0


def new_owner() -> str:
    return uuid.uuid4().hex[:16]


class StepStore(Store, Protocol):
    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def get_many(self, names: list[str]) -> list[dict[str, Any] | None]: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        """Record `value` unless the key holds a record already; returns the record that
        stands (so two deliveries of one step racing each other agree on one result)."""
        ...

    async def claim(self, claim_key: str, record_keys: list[str], ttl_s: float) -> Claim:
        """The records of `record_keys`; unless all are there, the claim of `claim_key` for
        a new owner. Raises StepHeld when another owner holds it."""
        ...

    async def renew(self, claim_key: str, token: str, ttl_s: float) -> bool:
        """Extend the claim while it is `token`'s; False when it is not any more."""
        ...

    async def record_claimed(self, claim_key: str, token: str, key: str, *, value: dict[str, Any],
                             release: bool = False) -> dict[str, Any]:
        """Record `value` under `key` unless recorded already (returns the record that
        stands), and with `release` drop the claim (the step's last record). Raises
        StepHeld when another owner holds the claim now."""
        ...

    async def release(self, claim_key: str, token: str) -> None:
        """Drop the claim if it is still `token`'s."""
        ...


@dataclass
class InMemoryStepStore(Declares):
    records: dict[str, bytes] = field(default_factory=dict)
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)
    """claim key -> (token, expiry on the monotonic clock)."""
    fences: dict[str, int] = field(default_factory=dict)

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = self.records.get(key)
        return None if raw is None else codec.loads(raw)

    async def get_many(self, names: list[str]) -> list[dict[str, Any] | None]:
        return [await self.get(k) for k in names]

    async def put(self, key: str, value: dict[str, Any]) -> None:
        self.records[key] = codec.dumps(value)

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        if key not in self.records:
            self.records[key] = codec.dumps(value)
        return codec.loads(self.records[key])

    async def claim(self, claim_key: str, record_keys: list[str], ttl_s: float) -> Claim:
        records = await self.get_many(record_keys)
        if all(r is not None for r in records):
            return Claim(records, None)
        held = self.claims.get(claim_key)
        if held is not None and held[1] > time.monotonic():
            raise StepHeld(f"step {claim_key} is claimed by {held[0]}")
        self.fences[claim_key] = self.fences.get(claim_key, 0) + 1
        token = f"{new_owner()}|{self.fences[claim_key]}"
        self.claims[claim_key] = (token, time.monotonic() + ttl_s)
        return Claim(records, token)

    async def renew(self, claim_key: str, token: str, ttl_s: float) -> bool:
        held = self.claims.get(claim_key)
        if held is None or held[0] != token:
            return False
        self.claims[claim_key] = (token, time.monotonic() + ttl_s)
        return True

    async def record_claimed(self, claim_key: str, token: str, key: str, *, value: dict[str, Any],
                             release: bool = False) -> dict[str, Any]:
        if key in self.records:
            return codec.loads(self.records[key])
        held = self.claims.get(claim_key)
        if held is not None and held[0] != token and held[1] > time.monotonic():
            raise StepHeld(f"step {claim_key} was taken over by {held[0]}")
        self.records[key] = codec.dumps(value)
        if release:
            await self.release(claim_key, token)
        return value

    async def release(self, claim_key: str, token: str) -> None:
        if self.claims.get(claim_key, ("",))[0] == token:
            del self.claims[claim_key]


_CLAIM_LUA = """
local n = #KEYS - 2
local records = redis.call('MGET', unpack(KEYS, 3, 2 + n))
local missing = false
for i = 1, n do
  if not records[i] then missing = true end
end
if not missing then return {0, records} end
local held = redis.call('GET', KEYS[1])
if held then return {2, held} end
local fence = redis.call('INCR', KEYS[2])
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
local token = ARGV[1] .. '|' .. fence
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return {1, records, token}
"""
"""KEYS: the claim, its fencing counter, then the records. ARGV: owner, claim TTL (ms),
counter TTL (s). {0, records}: all recorded; {2, holder}: claimed by another; {1, records,
token}: claimed now."""

_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RECORD_LUA = """
local standing = redis.call('GET', KEYS[2])
if standing then return {0, standing} end
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return {2, held} end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[2])
end
if ARGV[4] == '1' and held then redis.call('DEL', KEYS[1]) end
return {1}
"""
"""KEYS: the claim, the record. ARGV: token, value, record TTL (s), release ('1': drop
the claim, it fenced this record only). A claim that expired
with nobody else claiming does not stop the record: the call was made and nobody else
is making it."""

_PUT_LUA = """
if tonumber(ARGV[2]) > 0 then return redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1])
"""

_PUT_IF_ABSENT_LUA = """
local standing = redis.call('GET', KEYS[1])
if standing then return standing end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return false
"""
"""The record that stands (nil: this one, written now); one call on Redis 6.2 too."""

_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisStepStore(Declares):
    """keys.step_record strings with a TTL (settings.step_result_ttl_s); claims in
    keys.step_claim (TTL: the claim's) with their fencing counter keys.step_fence."""

    def __init__(self, redis: aioredis.Redis, ttl_s: int, replication: Replication | None = None,
                 *, patience_s: float = 0.0) -> None:
        """`replication`: records wait for the master's replicas (replication.py).
        `patience_s`: how long a record is retried through an outage (a failover, a
        restart) before it fails: the call it records was made, and a record that fails
        has it made again by the next delivery."""
        self._r = redis
        self._ttl = ttl_s
        self._rep = replication or Replication(redis)
        self._patience_s = patience_s
        self._claim = redis.register_script(_CLAIM_LUA)
        self._renew = redis.register_script(_RENEW_LUA)
        self._record = redis.register_script(_RECORD_LUA)
        self._release = redis.register_script(_RELEASE_LUA)
        self._put = redis.register_script(_PUT_LUA)
        self._put_if_absent = redis.register_script(_PUT_IF_ABSENT_LUA)

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self._r.get(keys.step_record(key))
        return None if raw is None else codec.loads(raw)

    async def get_many(self, names: list[str]) -> list[dict[str, Any] | None]:
        if not names:
            return []
        raws = await self._r.mget([keys.step_record(k) for k in names])
        return [None if raw is None else codec.loads(raw) for raw in raws]

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await self._written(ScriptCall(self._put, [keys.step_record(key)], [codec.dumps(value), self._ttl]))

    async def put_if_absent(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        standing = await self._written(ScriptCall(self._put_if_absent, [keys.step_record(key)],
                                                  [codec.dumps(value), self._ttl]))
        return value if standing is None else codec.loads(standing)

    async def claim(self, claim_key: str, record_keys: list[str], ttl_s: float) -> Claim:
        # Claims, renewals and releases wait for no replica (a claim lost in a failover is
        # taken again, fenced by its counter), so they go out as plain scripts: on the
        # process's script channel where it has one (replication.py, script_channel.py).
        reply = await self._rep.run(ScriptCall(
            self._claim, [keys.step_claim(claim_key), keys.step_fence(claim_key), *map(keys.step_record, record_keys)],
            [new_owner(), max(1, int(ttl_s * 1000)), self._ttl]), durable=False)
        if reply[0] == 2:
            raise StepHeld(f"step {claim_key} is claimed by {_text(reply[1])}")
        records = [None if raw is None else codec.loads(raw) for raw in reply[1]]
        return Claim(records, _text(reply[2]) if reply[0] == 1 else None)

    async def renew(self, claim_key: str, token: str, ttl_s: float) -> bool:
        return bool(await self._rep.run(ScriptCall(self._renew, [keys.step_claim(claim_key)],
                                                   [token, max(1, int(ttl_s * 1000))]), durable=False))

    async def record_claimed(self, claim_key: str, token: str, key: str, *, value: dict[str, Any],
                             release: bool = False) -> dict[str, Any]:
        reply = await self._written(ScriptCall(self._record, [keys.step_claim(claim_key), keys.step_record(key)],
                                               [token, codec.dumps(value), self._ttl, "1" if release else "0"]))
        if reply[0] == 2:
            raise StepHeld(f"step {claim_key} was taken over by {_text(reply[1])}")
        return codec.loads(reply[1]) if reply[0] == 0 else value

    async def release(self, claim_key: str, token: str) -> None:
        await self._rep.run(ScriptCall(self._release, [keys.step_claim(claim_key)], [token]), durable=False)

    async def _written(self, call: ScriptCall) -> Any:
        """A record's script, on the master's replicas, retried through an outage of up to
        `patience_s` (the claim's owner keeps its message alive meanwhile)."""
        give_up = time.monotonic() + self._patience_s
        pause = 0.1
        while True:
            try:
                return await self._rep.run(call)
            except OUTAGE_ERRORS:
                if time.monotonic() + pause > give_up:
                    raise
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


@asynccontextmanager
async def renewed(store: StepStore, claim_key: str, token: str, *, ttl_s: float) -> AsyncIterator[None]:
    """Keep the claim alive while the call it fences runs (renewed every third of its
    TTL). A worker that stops (SIGSTOP, a long GC pause) stops renewing, and its claim
    expires after one TTL, like its message's AckWait. The renewal is told to stop, never
    cancelled: a Redis command cancelled half-way is not worth the risk to the connection."""
    renewal = _Renewal(store, claim_key, token, ttl_s=ttl_s)
    try:
        yield
    finally:
        await renewal.stop()


class _Renewal:
    """The renewals of one claim: a timer every third of the TTL, and a task only while a
    renewal runs. Most calls end before their first third (a model's answer, a tool's
    result), so a call costs one timer set and cancelled, not a task woken at its end."""

    def __init__(self, store: StepStore, claim_key: str, token: str, *, ttl_s: float) -> None:
        self.store, self.claim_key, self.token, self.ttl_s = store, claim_key, token, ttl_s
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._running: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(ttl_s / 3, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._running = self._loop.create_task(self._renew(), name=f"claim-renewal {self.claim_key}")

    async def _renew(self) -> None:
        try:
            kept = await self.store.renew(self.claim_key, self.token, self.ttl_s)
        except OUTAGE_ERRORS:  # Redis away (a failover): renewed again once it answers
            kept = True
        if kept and not self._stopped:
            self._timer = self._loop.call_later(self.ttl_s / 3, self._due)

    async def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            with contextlib.suppress(Exception):  # a failed renewal only shortens the claim
                await self._running
