"""One Redis client per process, sized for many concurrent sessions."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis


def connect_redis(url: str, max_connections: int = 512, **options: Any) -> aioredis.Redis:
    """`options`: more keyword arguments of ``Redis.from_url`` — the password and TLS CA
    of the operator's settings (shared/credentials.py ``redis_connect_options``)."""
    # redis-py's asyncio pool caps at 100 connections by default, which stalls a
    # router under a few hundred concurrent sessions (measured with `make bench`).
    return aioredis.Redis.from_url(url, max_connections=max_connections, decode_responses=False, **options)
