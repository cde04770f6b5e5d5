"""Where the model limits' fleet-wide budget lives: one set of keys per limit key, each in
its own hash slot (keys.model_limit), every change one Lua call on Redis's own clock.

    inflight    sorted set: request lease -> expiry (ms); a replica renews its leases, so a
                killed one's share of `max_concurrent` comes back when they expire
    window      hash `<r|i|o>:<second>` -> requests, input and output tokens begun in that
                second; 61 seconds of them are counted, so any 60 s window is covered
    cooldown    the time (ms) until which no replica sends (a provider's retry-after)
    waiting     sorted set: the generations that wait, by fair-queue tag (below)
    waiter_ttl  sorted set: waiting generation -> expiry (a waiter that stops asking leaves)
    tags, vtime the fair queue: a tenant's next waiter gets the tag max(vtime, its last
                tag) + 1, and an admission moves vtime to the tag it admitted, so the
                tenants' waiters take turns and one tenant's backlog does not hold the others
                behind all of it; within a tenant, arrival order

A generation is admitted when it is among the first free slots of the queue and every
window has room; else it waits (reason and expected wait in the answer) and asks again
when woken (services/llm/limiter.py). Waiting and in-flight requests are counted under their own keys,
so a redelivered step that asks again with the same lease is never counted twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.model_limits import LEASE_S, ModelLimit
from loopwire.shared.contract.query_replies import LimitUsage
from loopwire.shared.stores.replication import Replication, ScriptCall

__all__ = ["Admission", "ModelLimitStore", "WAITER_TTL_S", "wake_notice"]

WAITER_TTL_S = 30.0
"""A waiting generation asks again at least this often, or leaves the queue."""
KEY_TTL_MS = 24 * 3600 * 1000
_PARTS = ("inflight", "window", "cooldown", "waiting", "waiter_ttl", "tags", "vtime")

# Shared by the scripts: the clock, expiries, and the window's sums.
_PRELUDE = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
for _, m in ipairs(gone) do redis.call('ZREM', KEYS[4], m); redis.call('ZREM', KEYS[5], m) end
local sums = {r = 0, i = 0, o = 0}
local buckets = {r = {}, i = {}, o = {}}
local raw = redis.call('HGETALL', KEYS[2])
for j = 1, #raw, 2 do
  local kind, s = string.match(raw[j], '^(%a):(%d+)$')
  s = tonumber(s)
  if s == nil or s <= sec - 61 then
    redis.call('HDEL', KEYS[2], raw[j])
  else
    local n = tonumber(raw[j + 1])
    sums[kind] = sums[kind] + n
    table.insert(buckets[kind], {s, n})
  end
end
-- ms until `excess` of kind's count has left the window
local function drain_ms(kind, excess)
  local b = buckets[kind]
  table.sort(b, function(x, y) return x[1] < y[1] end)
  local dropped = 0
  for _, e in ipairs(b) do
    dropped = dropped + e[2]
    if dropped >= excess then return math.max(1, (e[1] + 61) * 1000 - now) end
  end
  return 1000
end
"""

_ADMIT = (
    _PRELUDE
    + """
local member, tenant = ARGV[1], ARGV[2]
local rpm, itpm, otpm, maxc = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local in_t, out_t = tonumber(ARGV[7]), tonumber(ARGV[8])
if redis.call('ZSCORE', KEYS[1], member) then  -- admitted before (a redelivery): the same lease
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[9]), member)
  return {1, '', 0, sec, redis.call('ZCARD', KEYS[4])}
end
local tag = tonumber(redis.call('ZSCORE', KEYS[4], member))
if not tag then
  local v = tonumber(redis.call('GET', KEYS[7])) or 0
  tag = math.max(v, tonumber(redis.call('HGET', KEYS[6], tenant)) or 0) + 1
  redis.call('HSET', KEYS[6], tenant, tag)
  redis.call('ZADD', KEYS[4], tag, member)
end
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[10]), member)
local rank = redis.call('ZRANK', KEYS[4], member)
local waiting = redis.call('ZCARD', KEYS[4])
local cool = tonumber(redis.call('GET', KEYS[3])) or 0
if cool > now then return {0, 'cooldown', cool - now, rank, waiting} end
if maxc > 0 and rank >= maxc - redis.call('ZCARD', KEYS[1]) then
  return {0, 'concurrency', 0, rank, waiting}
end
if rpm > 0 and sums.r + rank >= rpm then
  return {0, 'rpm', drain_ms('r', sums.r + rank - rpm + 1), rank, waiting}
end
if itpm > 0 and sums.i > 0 and sums.i + in_t > itpm then
  return {0, 'input_tpm', drain_ms('i', sums.i + in_t - itpm), rank, waiting}
end
if otpm > 0 and sums.o > 0 and sums.o + out_t > otpm then
  return {0, 'output_tpm', drain_ms('o', sums.o + out_t - otpm), rank, waiting}
end
redis.call('ZREM', KEYS[4], member)
redis.call('ZREM', KEYS[5], member)
if tag > (tonumber(redis.call('GET', KEYS[7])) or 0) then redis.call('SET', KEYS[7], tag) end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[9]), member)
redis.call('HINCRBY', KEYS[2], 'r:' .. sec, 1)
redis.call('HINCRBY', KEYS[2], 'i:' .. sec, in_t)
redis.call('HINCRBY', KEYS[2], 'o:' .. sec, out_t)
for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[11]) end
return {1, '', 0, sec, waiting - 1}
"""
)

_RELEASE = (
    _PRELUDE
    + """
redis.call('ZREM', KEYS[1], ARGV[1])
local s = tonumber(ARGV[2])
if s > sec - 61 then
  if tonumber(ARGV[3]) ~= 0 then redis.call('HINCRBY', KEYS[2], 'i:' .. s, ARGV[3]) end
  if tonumber(ARGV[4]) ~= 0 then redis.call('HINCRBY', KEYS[2], 'o:' .. s, ARGV[4]) end
end
local maxc = tonumber(ARGV[5])
local free = redis.call('ZCARD', KEYS[4])
if maxc > 0 then free = math.min(free, maxc - redis.call('ZCARD', KEYS[1])) end
if free <= 0 then return {} end
return redis.call('ZRANGE', KEYS[4], 0, free - 1)
"""
)

_LEAVE = """
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
return 0
"""

_RENEW = """
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', until_ms, ARGV[i]) end
return n
"""

_COOL = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
if until_ms > (tonumber(redis.call('GET', KEYS[3])) or 0) then
  redis.call('SET', KEYS[3], until_ms, 'PX', tonumber(ARGV[1]))
end
return until_ms
"""

_USAGE = (
    _PRELUDE
    + """
local cool = tonumber(redis.call('GET', KEYS[3])) or 0
if cool <= now then cool = 0 end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[4]), sums.r, sums.i, sums.o, cool}
"""
)


@dataclass(frozen=True, slots=True)
class Admission:
    """The budget's answer to one generation."""

    admitted: bool
    reason: str = ""
    """Why it waits (`rpm`, `input_tpm`, `output_tpm`, `concurrency`, `cooldown`)."""
    wait_s: float = 0.0
    """The expected wait (0: until a request in flight ends)."""
    second: int = 0
    """The window second its request counts in (for the correction from its usage)."""
    waiting: int = 0
    """Generations waiting for this key, after this answer."""


class ModelLimitStore:
    """The budgets every llm replica shares: each call one script on the key's slot, on the
    process's script channel. None waits for Redis replicas: a count lost in a failover
    errs toward sending, and lasts one window."""

    def __init__(self, redis: Any, replication: Replication | None = None) -> None:
        self.redis = redis
        self._rep = replication if replication is not None else Replication(redis)
        self._admit = redis.register_script(_ADMIT)
        self._release = redis.register_script(_RELEASE)
        self._leave = redis.register_script(_LEAVE)
        self._renew = redis.register_script(_RENEW)
        self._cool = redis.register_script(_COOL)
        self._usage = redis.register_script(_USAGE)

    async def _run(self, script: Any, key: str, args: list[Any]) -> Any:
        names = [keys.model_limit(key, part) for part in _PARTS]
        return await self._rep.run(ScriptCall(script, names, args), durable=False)

    async def admit(
        self, key: str, limit: ModelLimit, lease: str, *, tenant: str, input_tokens: int, output_tokens: int
    ) -> Admission:
        out = await self._run(
            self._admit,
            key,
            [
                lease,
                tenant,
                limit.rpm or 0,
                limit.input_tpm or 0,
                limit.output_tpm or 0,
                limit.max_concurrent or 0,
                max(0, input_tokens),
                max(0, output_tokens),
                int(LEASE_S * 1000),
                int(WAITER_TTL_S * 1000),
                KEY_TTL_MS,
            ],
        )
        ok, reason, wait_ms, second, waiting = out
        return Admission(bool(int(ok)), _text(reason), int(wait_ms) / 1000, int(second), int(waiting))

    async def release(
        self,
        key: str,
        limit: ModelLimit,
        lease: str,
        *, second: int,
        input_delta: int = 0,
        output_delta: int = 0,
    ) -> list[str]:
        """Give the lease back and correct its counts; the waiters that may go now."""
        out = await self._run(
            self._release, key, [lease, second, input_delta, output_delta, limit.max_concurrent or 0]
        )
        return [_text(m) for m in out or []]

    async def leave(self, key: str, lease: str) -> None:
        """A waiter that stops waiting (admitted elsewhere, cancelled, or past its wait)."""
        await self._run(self._leave, key, [lease])

    async def renew(self, key: str, leases: list[str]) -> None:
        """Extend the leases this replica still holds (its requests in flight)."""
        if leases:
            await self._run(self._renew, key, [int(LEASE_S * 1000), *leases])

    async def cool_down(self, key: str, seconds: float) -> None:
        """No replica sends to `key`'s models for `seconds` (a provider's retry-after)."""
        await self._run(self._cool, key, [max(1, int(seconds * 1000))])

    async def usage(self, key: str, limit: ModelLimit) -> LimitUsage:
        in_flight, waiting, requests, input_tokens, _output, cool = await self._run(self._usage, key, [])
        return {
            "key": key,
            "rpm": limit.rpm,
            "input_tpm": limit.input_tpm,
            "output_tpm": limit.output_tpm,
            "max_concurrent": limit.max_concurrent,
            "in_flight": int(in_flight),
            "waiting": int(waiting),
            "requests_last_60s": int(requests),
            "input_tokens_last_60s": int(input_tokens),
            "cooldown_until": int(cool) / 1000 if int(cool) else None,
        }


def wake_notice(key: str, leases: list[str]) -> bytes:
    return json.dumps({"key": key, "leases": leases}, separators=(",", ":")).encode()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
