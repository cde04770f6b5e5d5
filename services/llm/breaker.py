"""A circuit breaker per model, shared by every llm replica through Redis.

State per model (Redis hash `lw:breaker:<model>`)::

    failures     consecutive retryable failures (reset by any success)
    open_until   0 while closed; else the time until which the model is skipped
    probe        the token of the replica holding the half-open probe, probe_until its expiry

    closed --(failures >= threshold)--> open --(cool-down over)--> half-open
    half-open: ONE caller (fleet-wide) claims the probe; others still skip the model
      probe succeeds -> closed          probe fails -> open for another cool-down

Only retryable failures count (fallback.py reports those): a 400 says nothing about a
model's health, a 529 does. Time is the caller's clock (`clock`, seconds), passed into the
Lua scripts, so tests drive a fake clock against Redis and the in-memory store alike.

fallback.py asks a synchronous `BreakerGate` before each model. The shared state is async
(Redis), so a request gets its own `RunGate`: `await breaker.gate(models)` reads the state
of the request's models in one go and claims the half-open probe of any model that is due
one; `allow()` then answers from that snapshot; `record_*()` write through in background
tasks at once (other replicas see a failure while this request still retries); and
`await gate.close()` waits for those writes and releases probe claims the request never
used (its primary answered before a fallback's turn came).

A healthy model costs no Redis call per request: a clean `closed` verdict (no failure
counted) is reused in process for `CLOSED_REUSE_S`, and a success is written only when the
request's snapshot saw failures to reset (a success on a clean count changes nothing).
A failure this process records drops its reused verdict at once, so its next request
reads the count again; another replica's failures are seen at most `CLOSED_REUSE_S` late.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopwire.shared.observability import metrics

log = logging.getLogger("loopwire.llm.breaker")

Clock = Callable[[], float]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
FAILING = "failing"
"""An acquire verdict: closed, with failures counted that a success must reset."""
CLOSED_REUSE_S = 1.0
"""How long a clean `closed` verdict is reused in process without asking the store."""
KEY_PREFIX = "lw:breaker:"
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

    async def acquire(self, model: str, now: float, token: str, policy: BreakerPolicy) -> str:
        """`closed` (no failure counted), `failing` (closed, failures counted), `open`
        (skip), or `probe` (half-open, and `token` now holds the probe)."""
        ...

    async def record(self, model: str, ok: bool, now: float, token: str, policy: BreakerPolicy) -> str:
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
class _Entry:
    failures: int = 0
    open_until: float = 0.0
    probe: str = ""
    probe_until: float = 0.0


class MemoryBreakerStore:
    """One process's breakers (tests, and a single replica without Redis)."""

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}

    async def acquire(self, model: str, now: float, token: str, policy: BreakerPolicy) -> str:
        e = self.entries.setdefault(model, _Entry())
        if e.open_until == 0:
            return FAILING if e.failures else CLOSED
        if now < e.open_until or (e.probe and e.probe_until > now):
            return OPEN
        e.probe, e.probe_until = token, now + policy.probe_ttl_s
        return "probe"

    async def record(self, model: str, ok: bool, now: float, token: str, policy: BreakerPolicy) -> str:
        e = self.entries.setdefault(model, _Entry())
        if ok:
            self.entries[model] = _Entry()
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
    """Breakers shared by every replica: one hash per model, each change one Lua call."""

    def __init__(self, redis: Any, key_prefix: str = KEY_PREFIX) -> None:
        self.redis = redis
        self.key_prefix = key_prefix
        self._acquire = redis.register_script(_ACQUIRE)
        self._record = redis.register_script(_RECORD)
        self._release = redis.register_script(_RELEASE)

    def key(self, model: str) -> str:
        return f"{self.key_prefix}{model}"

    async def acquire(self, model: str, now: float, token: str, policy: BreakerPolicy) -> str:
        out = await self._acquire(keys=[self.key(model)], args=[repr(now), token, repr(policy.probe_ttl_s), KEY_TTL_S])
        return _text(out)

    async def record(self, model: str, ok: bool, now: float, token: str, policy: BreakerPolicy) -> str:
        out = await self._record(keys=[self.key(model)], args=["1" if ok else "0", repr(now), token,
                                                              policy.failure_threshold, repr(policy.cooldown_s),
                                                              KEY_TTL_S])
        return _text(out)

    async def release(self, model: str, token: str) -> None:
        await self._release(keys=[self.key(model)], args=[token])

    async def state(self, model: str, now: float) -> str:
        raw = await self.redis.hget(self.key(model), "open_until")
        open_until = float(_text(raw)) if raw else 0.0
        if open_until == 0:
            return CLOSED
        return OPEN if now < open_until else HALF_OPEN


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the breaker and its per-request gate ----------------------------------------------------
class CircuitBreaker:
    """The fleet-wide breaker; `await gate(models)` gives one request its BreakerGate."""

    def __init__(self, store: BreakerStore, policy: BreakerPolicy | None = None, clock: Clock = time.time) -> None:
        self.store = store
        self.policy = policy or BreakerPolicy()
        self.clock = clock
        self._closed_until: dict[str, float] = {}
        """model -> until when (clock) its last clean `closed` verdict is reused."""

    @property
    def enabled(self) -> bool:
        return self.policy.failure_threshold > 0

    async def gate(self, models: list[str]) -> RunGate:
        gate = RunGate(self)
        if not self.enabled:
            return gate
        now = self.clock()
        for model in dict.fromkeys(models):
            if now < self._closed_until.get(model, 0.0):
                gate.verdicts[model] = CLOSED  # healthy a moment ago: no need to ask again
                continue
            try:
                verdict = await self.store.acquire(model, now, gate.token, self.policy)
            except Exception as exc:  # Redis away: fail open, a breaker must not stop traffic
                log.warning("breaker state of %s unavailable (%s): allowing it", model, exc)
                verdict = FAILING  # unknown: a success is written, as before
            if verdict == CLOSED:
                self._closed_until[model] = now + CLOSED_REUSE_S
            else:
                self._closed_until.pop(model, None)
            gate.verdicts[model] = verdict
            if verdict == "probe":
                gate.probes.add(model)
            metrics.set_breaker_state(model, {"probe": HALF_OPEN, FAILING: CLOSED}.get(verdict, verdict))
        return gate

    def forget(self, model: str) -> None:
        """Stop reusing `model`'s closed verdict (this process just saw it fail)."""
        self._closed_until.pop(model, None)

    async def state(self, model: str) -> str:
        return await self.store.state(model, self.clock())


@dataclass(eq=False)
class RunGate:
    """The BreakerGate of one request (fallback.py's synchronous protocol)."""

    breaker: CircuitBreaker
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    verdicts: dict[str, str] = field(default_factory=dict)
    probes: set[str] = field(default_factory=set)
    """Models whose half-open probe this request holds and has not used yet."""
    _writes: list[asyncio.Task[None]] = field(default_factory=list)

    def allow(self, model: str) -> bool:
        return self.verdicts.get(model, CLOSED) != OPEN

    def record_success(self, model: str) -> None:
        self._write(model, True)

    def record_failure(self, model: str) -> None:
        self._write(model, False)

    def _write(self, model: str, ok: bool) -> None:
        if not self.breaker.enabled:
            return
        self.probes.discard(model)  # the probe was used: its outcome settles the state
        if ok and self.verdicts.get(model) == CLOSED:
            return  # nothing counted to reset: the write would change nothing
        if not ok:
            self.breaker.forget(model)
            if self.verdicts.get(model) == CLOSED:
                self.verdicts[model] = FAILING  # a later success of this request resets the count
        self._writes.append(asyncio.get_running_loop().create_task(self._record(model, ok)))

    async def _record(self, model: str, ok: bool) -> None:
        b = self.breaker
        try:
            state = await b.store.record(model, ok, b.clock(), self.token, b.policy)
        except Exception as exc:
            log.warning("breaker outcome of %s not recorded (%s)", model, exc)
            return
        if not ok:
            b.forget(model)  # a verdict read while this write was on its way is stale
        metrics.set_breaker_state(model, state)
        if state == OPEN and self.verdicts.get(model) != OPEN:
            log.warning("circuit breaker for %s opened for %.0fs", model, b.policy.cooldown_s)

    async def close(self) -> None:
        """Wait for the outcome writes; give back probe claims this request never used."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
            self._writes.clear()
        for model in list(self.probes):
            try:
                await self.breaker.store.release(model, self.token)
            except Exception as exc:
                log.warning("breaker probe of %s not released (%s); it expires by itself", model, exc)
        self.probes.clear()


def breaker_from_settings(settings: Any, redis: Any, clock: Clock = time.time) -> CircuitBreaker:
    policy = BreakerPolicy(failure_threshold=settings.llm_breaker_failures, cooldown_s=settings.llm_breaker_cooldown_s,
                           probe_ttl_s=settings.llm_breaker_probe_ttl_s)
    return CircuitBreaker(RedisBreakerStore(redis), policy, clock)
