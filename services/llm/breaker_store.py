"""Where the circuit breakers' state lives: one entry per model, each change atomic.

State per model (Redis hash keys.breaker)::

    failures     consecutive retryable failures (reset by any success)
    open_until   0 while closed; else the time until which the model is skipped
    probe        the token of the replica holding the half-open probe, probe_until its expiry

`RedisBreakerStore` is shared by every replica (each change one Lua call);
`MemoryBreakerStore` is one process's (tests, and a single replica without Redis). Time
is the caller's clock, passed in, so tests drive a fake clock against both alike. The
transitions themselves are breaker.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from loopwire.shared.contract import keys
from loopwire.shared.stores.replication import Replication, ScriptCall

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
FAILING = "failing"
"""An acquire verdict: closed, with failures counted that a success must reset."""
KEY_TTL_S = 24 * 3600
"""Breaker hashes of models nobody calls any more expire after a day."""


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 5
    """Consecutive failures that open the breaker; 0 disables it."""
    cooldown_s: float = 30.0
    probe_ttl_s: float = 120.0


class BreakerStore(Protocol):
    """Where breaker state lives; every operation is atomic per model."""

    async def acquire(self, model: str, now: float, token: str, *, policy: BreakerPolicy) -> str:
        """`closed` (no failure counted), `failing` (closed, failures counted), `open`
        (skip), or `probe` (half-open, and `token` now holds the probe)."""
        ...

    async def record(self, model: str, ok: bool, now: float, *, token: str, policy: BreakerPolicy) -> str:
        """Record an outcome; returns the state after it (`closed` or `open`)."""
        ...

    async def release(self, model: str, token: str) -> None:
        """Give back a probe claim `token` holds (no-op otherwise)."""
        ...

    async def state(self, model: str, now: float) -> str:
        """`closed`, `open` or `half_open`, without claiming anything."""
        ...


# -- in memory ---------------------------------------------------------------------------------
@dataclass
class BreakerEntry:
    """One model's breaker in `MemoryBreakerStore` (the fields of the Redis hash)."""

    failures: int = 0
    open_until: float = 0.0
    probe: str = ""
    probe_until: float = 0.0


class MemoryBreakerStore:
    """One process's breakers (tests, and a single replica without Redis)."""

    def __init__(self) -> None:
        self.entries: dict[str, BreakerEntry] = {}

    async def acquire(self, model: str, now: float, token: str, *, policy: BreakerPolicy) -> str:
        e = self.entries.setdefault(model, BreakerEntry())
        if e.open_until == 0:
            return FAILING if e.failures else CLOSED
        if now < e.open_until or (e.probe and e.probe_until > now):
            return OPEN
        e.probe, e.probe_until = token, now + policy.probe_ttl_s
        return "probe"

    async def record(self, model: str, ok: bool, now: float, *, token: str, policy: BreakerPolicy) -> str:
        e = self.entries.setdefault(model, BreakerEntry())
        if ok:
            self.entries[model] = BreakerEntry()
            return CLOSED
        e.failures += 1
        if e.open_until > 0 or e.failures >= policy.failure_threshold:
            e.open_until = now + policy.cooldown_s
            if e.probe == token:
                e.probe, e.probe_until = "", 0.0
            return OPEN
        return CLOSED

    async def release(self, model: str, token: str) -> None:
        e = self.entries.get(model)
        if e is not None and e.probe == token:
            e.probe, e.probe_until = "", 0.0

    async def state(self, model: str, now: float) -> str:
        e = self.entries.get(model)
        if e is None or e.open_until == 0:
            return CLOSED
        return OPEN if now < e.open_until else HALF_OPEN


# -- Redis ----------------------------------------------------------------------------------------
_ACQUIRE = """
local h = redis.call('HMGET', KEYS[1], 'open_until', 'probe', 'probe_until', 'failures')
local open_until = tonumber(h[1]) or 0
if open_until == 0 then
  if (tonumber(h[4]) or 0) > 0 then return 'failing' end
  return 'closed'
end
local now = tonumber(ARGV[1])
if now < open_until then return 'open' end
if h[2] and h[2] ~= '' and (tonumber(h[3]) or 0) > now then return 'open' end
redis.call('HSET', KEYS[1], 'probe', ARGV[2], 'probe_until', tostring(now + tonumber(ARGV[3])))
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 'probe'
"""

_RECORD = """
local now = tonumber(ARGV[2])
if ARGV[1] == '1' then
  redis.call('DEL', KEYS[1])
  return 'closed'
end
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until')) or 0
redis.call('EXPIRE', KEYS[1], ARGV[6])
if open_until > 0 or failures >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'open_until', tostring(now + tonumber(ARGV[5])))
  if redis.call('HGET', KEYS[1], 'probe') == ARGV[3] then
    redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
  end
  return 'open'
end
return 'closed'
"""

_RELEASE = """
if redis.call('HGET', KEYS[1], 'probe') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
end
return 0
"""


class RedisBreakerStore:
    """Breakers shared by every replica: one hash per model, each change one Lua call, on
    the process's script channel (`replication`, shared/stores/replication.py) since the
    acquire runs before every model call. None waits for Redis replicas: a breaker's
    count lost in a failover only counts again."""

    def __init__(self, redis: Any, replication: Replication | None = None) -> None:
        self.redis = redis
        self._rep = replication if replication is not None else Replication(redis)
        self._acquire = redis.register_script(_ACQUIRE)
        self._record = redis.register_script(_RECORD)
        self._release = redis.register_script(_RELEASE)

    async def _run(self, script: Any, model: str, args: list[Any]) -> Any:
        return await self._rep.run(ScriptCall(script, [self.key(model)], args), durable=False)

    def key(self, model: str) -> str:
        return keys.breaker(model)

    async def acquire(self, model: str, now: float, token: str, *, policy: BreakerPolicy) -> str:
        out = await self._run(self._acquire, model, [repr(now), token, repr(policy.probe_ttl_s), KEY_TTL_S])
        return _text(out)

    async def record(self, model: str, ok: bool, now: float, *, token: str, policy: BreakerPolicy) -> str:
        out = await self._run(self._record, model, ["1" if ok else "0", repr(now), token,
                                                   policy.failure_threshold, repr(policy.cooldown_s), KEY_TTL_S])
        return _text(out)

    async def release(self, model: str, token: str) -> None:
        await self._run(self._release, model, [token])

    async def state(self, model: str, now: float) -> str:
        raw = await self.redis.hget(self.key(model), "open_until")
        open_until = float(_text(raw)) if raw else 0.0
        if open_until == 0:
            return CLOSED
        return OPEN if now < open_until else HALF_OPEN


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
