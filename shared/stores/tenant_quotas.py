"""The tenants' slots, queues and daily usage in Redis (docs/security.md, "Tenant limits").

Every key of one tenant carries the hash tag `{t:<tenant>}`, so on a Redis Cluster they
share one slot and each operation below is one Lua script on it. No script touches a
session's keys too (those live in the session's own slot): the router commits a run's
state first and settles its tenant's keys after the commit, idempotently by run id, and
a sweep (services/router/shell/quota_sweep.py) reconciles the two after a crash in between.

- `slots`: hash run id -> session id, the tenant's runs that hold a slot (running, or
  granted one and about to start);
- `queue`: sorted set of the run ids waiting for a slot, by arrival (a counter), and
  `waiting`: hash run id -> session id of those;
- `day:<YYYY-MM-DD>`: hash {tokens, usd}, the tenant's usage of that UTC day;
- `run:<run id>`: hash {tokens, usd}, how much of that run is counted already. A run's
  usage is reported as its running total, and only what exceeds the counted total is
  added, so reporting a total again (a replayed outbox, a carried-forward end) counts
  nothing twice, in any order.

A set of their own (shared/contract/keys.py `TENANTS`) lists the tenants that have keys,
for the sweep. Key names: shared/contract/keys.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from loopwire.shared.contract import keys
from loopwire.shared.contract.tenant_limits import TenantLimit

__all__ = ["Settled", "Snapshot", "TenantQuotaStore"]

DAY_TTL_S = 2 * 24 * 3600
RUN_TTL_S = 7 * 24 * 3600
"""A run's counted total outlives its last count by this much (a total reported after
that, by a run silent for a week, is counted again from 0)."""


_SETTLE_LUA = """
-- KEYS: slots, queue, waiting, arrivals. ARGV: max_running (-1: none), max_queued (-1: none),
-- n, n run ids to release, the run id to acquire ('' none), its session id.
local max_running, max_queued, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, n do
  local run = ARGV[3 + i]
  redis.call('HDEL', KEYS[1], run)
  if redis.call('ZREM', KEYS[2], run) == 1 then redis.call('HDEL', KEYS[3], run) end
end
local function room()
  return max_running < 0 or redis.call('HLEN', KEYS[1]) < max_running
end
local promoted = {}
while room() do
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #head == 0 then break end
  local sid = redis.call('HGET', KEYS[3], head[1])
  redis.call('ZREM', KEYS[2], head[1])
  redis.call('HDEL', KEYS[3], head[1])
  if sid then
    redis.call('HSET', KEYS[1], head[1], sid)
    promoted[#promoted + 1] = head[1]
    promoted[#promoted + 1] = sid
  end
end
local verdict, position = '', 0
local run, sid = ARGV[4 + n], ARGV[5 + n]
if run ~= '' then
  if redis.call('HEXISTS', KEYS[1], run) == 1 then
    verdict = 'granted'
  else
    local rank = redis.call('ZRANK', KEYS[2], run)
    if rank then
      verdict, position = 'queued', rank + 1
    elseif room() then  -- the loop above emptied the queue: nobody waits before this run
      redis.call('HSET', KEYS[1], run, sid)
      verdict = 'granted'
    elseif max_queued >= 0 and redis.call('ZCARD', KEYS[2]) >= max_queued then
      verdict = 'refused'
    else
      redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), run)
      redis.call('HSET', KEYS[3], run, sid)
      verdict, position = 'queued', redis.call('ZCARD', KEYS[2])
    end
  end
end
local out = {verdict, position, redis.call('HLEN', KEYS[1]), redis.call('ZCARD', KEYS[2])}
for i = 1, #promoted do out[#out + 1] = promoted[i] end
return out
"""

_COUNT_LUA = """
-- KEYS: the day's hash, then one `run:` hash per run. ARGV: day ttl, run ttl, then per run
-- its total tokens and total usd so far.
local dt, du = 0, 0
for i = 2, #KEYS do
  local tokens, usd = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local seen = redis.call('HMGET', KEYS[i], 'tokens', 'usd')
  local t0, u0 = tonumber(seen[1]) or 0, tonumber(seen[2]) or 0
  if tokens > t0 then dt = dt + (tokens - t0); t0 = tokens end
  if usd > u0 then du = du + (usd - u0); u0 = usd end
  redis.call('HSET', KEYS[i], 'tokens', string.format('%d', t0), 'usd', tostring(u0))
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[2]))
end
if dt > 0 then redis.call('HINCRBY', KEYS[1], 'tokens', string.format('%d', dt)) end
if du > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'usd', tostring(du)) end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
local today = redis.call('HMGET', KEYS[1], 'tokens', 'usd')
return {string.format('%d', dt), tostring(du), today[1] or '0', today[2] or '0'}
"""


@dataclass(frozen=True)
class Settled:
    verdict: str
    """For the run acquired: `granted`, `queued`, `refused`; '' when none was."""
    position: int
    """Its place in the queue when `queued` (1: next)."""
    running: int
    queued: int
    promoted: list[tuple[str, str]] = field(default_factory=list)
    """(run id, session id) of the queued runs this call gave a slot to, in queue order."""


@dataclass(frozen=True)
class Counted:
    tokens: int
    """Tokens this call added to the day (0 when the totals were counted already)."""
    usd: float
    tokens_today: int
    usd_today: float


@dataclass(frozen=True)
class Snapshot:
    slots: dict[str, str]
    """run id -> session id of the runs holding a slot."""
    queue: list[tuple[str, str]]
    """(run id, session id) of the waiting runs, first in line first."""


def _limit(value: int | None) -> str:
    return "-1" if value is None else str(value)


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class TenantQuotaStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._settle = redis.register_script(_SETTLE_LUA)
        self._count = redis.register_script(_COUNT_LUA)

    def _slot_keys(self, tenant: str) -> list[str]:
        return [keys.tenant_slots(tenant), keys.tenant_queue(tenant), keys.tenant_waiting(tenant),
                keys.tenant_arrivals(tenant)]

    async def settle(self, tenant: str, limit: TenantLimit, *, release: Sequence[str] = (),
                     acquire: tuple[str, str] | None = None) -> Settled:
        """Release `release` (idempotent: a run holds at most one slot or queue place),
        give freed slots to the queue's head, then acquire a slot for `acquire` (run id,
        session id): granted at once while the tenant has a free slot and nobody waits,
        else queued up to `max_queued`, else refused; asked again, the same run gets its
        slot or its place, never a second one."""
        run, sid = acquire or ("", "")
        raw = await self._settle(keys=self._slot_keys(tenant), args=[
            _limit(limit.max_running), _limit(limit.max_queued), str(len(release)), *release, run, sid])
        verdict, position, running, queued, *rest = raw
        promoted = [(_text(rest[i]), _text(rest[i + 1])) for i in range(0, len(rest), 2)]
        return Settled(_text(verdict), int(position), int(running), int(queued), promoted)

    async def count(self, tenant: str, day: str, totals: list[tuple[str, int, float]]) -> Counted:
        """Add to `tenant`'s usage of `day` what the runs' totals (run id, tokens, usd)
        exceed of what was counted of them before."""
        names = [keys.tenant_day(tenant, day), *(keys.tenant_run_counted(tenant, run) for run, _, _ in totals)]
        args: list[str] = [str(DAY_TTL_S), str(RUN_TTL_S)]
        for _, tokens, usd in totals:
            args += [str(int(tokens)), repr(float(usd))]
        dt, du, tokens_today, usd_today = await self._count(keys=names, args=args)
        return Counted(int(float(dt)), float(du), int(float(tokens_today)), float(usd_today))

    async def today(self, tenant: str, day: str) -> tuple[int, float]:
        tokens, usd = await self._r.hmget(keys.tenant_day(tenant, day), ["tokens", "usd"])
        return int(tokens or 0), float(usd or 0)

    async def counts(self, tenant: str) -> tuple[int, int]:
        """(running, queued) of `tenant` now."""
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.hlen(keys.tenant_slots(tenant))
            pipe.zcard(keys.tenant_queue(tenant))
            running, queued = await pipe.execute()
        return int(running), int(queued)

    async def snapshot(self, tenant: str) -> Snapshot:
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.tenant_slots(tenant))
            pipe.zrange(keys.tenant_queue(tenant), 0, -1)
            pipe.hgetall(keys.tenant_waiting(tenant))
            slots, queue, waiting = await pipe.execute()
        sessions = {_text(k): _text(v) for k, v in waiting.items()}
        return Snapshot(slots={_text(k): _text(v) for k, v in slots.items()},
                        queue=[(_text(r), sessions.get(_text(r), "")) for r in queue])

    async def register(self, tenant: str) -> None:
        await self._r.sadd(keys.TENANTS, tenant)

    async def tenants(self) -> list[str]:
        return sorted(_text(t) for t in await self._r.smembers(keys.TENANTS))

    async def claim_sweep(self, owner: str, ttl_s: float) -> bool:
        """Whether `owner` reconciles this interval (one router of the fleet does)."""
        return bool(await self._r.set(keys.TENANTS_SWEEP, owner, nx=True, px=max(1, int(ttl_s * 1000))))
