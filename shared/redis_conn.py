"""One Redis client per process, sized for many concurrent sessions."""

from __future__ import annotations

import redis.asyncio as aioredis


def connect_redis(url: str, max_connections: int = 512) -> aioredis.Redis:
    # redis-py's asyncio pool caps at 100 connections by default, which stalls a
    # router under a few hundred concurrent sessions (measured with `make bench`).
    return aioredis.Redis.from_url(url, max_connections=max_connections, decode_responses=False)
