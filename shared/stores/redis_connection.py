"""One Redis client per process, sized for many concurrent sessions, that rides out blips
and tells when Redis would lose its data on a restart."""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("loopwire.redis")

COMMAND_TIMEOUT_S = 10.0
"""No loopwire command blocks (no BLPOP, no XREAD BLOCK): one that takes this long is
talking to a Redis that is stalled or cut off, and fails as an outage instead of holding
its step (and, through its heartbeats, its session) for ever."""


def connect_redis(url: str, max_connections: int = 512, **options: Any) -> aioredis.Redis:
    """`options`: more keyword arguments of ``Redis.from_url`` — the password and TLS CA
    of the operator's settings (shared/runtime/credentials.py ``redis_connect_options``)."""
    # redis-py's asyncio pool caps at 100 connections by default, which stalls a
    # router under a few hundred concurrent sessions (measured with `make bench`).
    # A command that meets a dropped connection is retried on a new one a few times
    # (a Redis restart, a failover); a longer outage fails the step, and the handler
    # runner redelivers it with a growing delay (shared/runtime/redelivery.py).
    return aioredis.Redis.from_url(
        url, max_connections=max_connections, decode_responses=False,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        socket_connect_timeout=5.0, socket_timeout=COMMAND_TIMEOUT_S, socket_keepalive=True,
        health_check_interval=30, **options)


async def persistence_problem(redis: aioredis.Redis) -> str | None:
    """What a restart of this Redis would lose, from CONFIG GET appendonly / save; None when
    it persists its data (or when CONFIG is disabled, as on many managed Redis services,
    and persistence cannot be read)."""
    try:
        config = await redis.config_get("appendonly")
        config.update(await redis.config_get("save"))
    except RedisError as exc:
        log.info("Redis persistence not checked (CONFIG GET is not allowed: %s)", exc)
        return None
    text = {_str(k): _str(v) for k, v in config.items()}
    if text.get("appendonly", "").lower() == "yes":
        return None
    if text.get("save", "").strip():
        return ("Redis persists by snapshots only (save " + text["save"] + ", appendonly no): a restart "
                "loses what was written since the last snapshot (runs in flight, recent turns)")
    return ("Redis does not persist its data (appendonly no, no save points): a restart loses every "
            "session, run and step record")


async def warn_if_volatile(redis: aioredis.Redis) -> None:
    """A loud warning at start-up when a Redis restart would lose state."""
    try:
        problem = await persistence_problem(redis)
    except Exception as exc:  # Redis not up yet: the services wait for it anyway
        log.warning("Redis persistence not checked: %s", exc)
        return
    if problem:
        log.warning("!!! %s. Run Redis with an append-only file (appendonly yes, appendfsync everysec), as "
                    "the embedded Redis, docker-compose.yml and the Helm chart do (docs/deployment.md).", problem)


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
