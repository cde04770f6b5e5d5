"""One Redis client per process, sized for many concurrent sessions, that rides out blips
and tells when Redis would lose its data on a restart.

Three layouts, one client interface (redis-py's asyncio `Redis` API): one server, a Redis
Cluster (`RedisCluster`: the URL names any node, sessions spread over the masters by their
hash tag, shared/contract/keys.py) and a master behind Redis Sentinel (the sentinels
name the master of the moment, and the client follows a failover).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, MasterDownError, ReadOnlyError, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("loopwire.redis")

COMMAND_TIMEOUT_S = 10.0
"""No loopwire command blocks (no BLPOP, no XREAD BLOCK): one that takes this long is
talking to a Redis that is stalled or cut off, and fails as an outage instead of holding
its step (and, through its heartbeats, its session) for ever."""

OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,  # includes BusyLoadingError (a Redis still loading its data)
    RedisTimeoutError,
    ReadOnlyError,         # a replica promoted late, a failover under way
    MasterDownError,
    TryAgainError,
    ClusterDownError,
)
"""What a Redis that is away, or in the middle of a failover, answers."""


@dataclass(frozen=True)
class RedisTopology:
    """Which Redis a process talks to (the operator's settings, shared/runtime/credentials.py)."""

    url: str
    """One server; any node of a cluster (comma-separated: several, tried in turn); with
    sentinels, the scheme, database and credentials of the master (its host is the
    sentinels' answer)."""
    cluster: bool = False
    sentinels: list[tuple[str, int]] = field(default_factory=list)
    sentinel_master: str | None = None
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    """Connection options of the sentinels themselves (their own password, TLS)."""

    @property
    def replicated(self) -> bool:
        """Whether the layout has replicas a master's writes can be waited for."""
        return self.cluster or bool(self.sentinels)


def connect_redis(url: str | RedisTopology, max_connections: int = 512, **options: Any) -> aioredis.Redis:
    """`options`: more keyword arguments of ``Redis.from_url`` — the password and TLS CA
    of the operator's settings (shared/runtime/credentials.py ``redis_connect_options``).
    A RedisCluster is returned as the `Redis` it stands in for (the same commands)."""
    topology = url if isinstance(url, RedisTopology) else RedisTopology(url)
    # redis-py's asyncio pool caps at 100 connections by default, which stalls a
    # router under a few hundred concurrent sessions (measured with `make bench`).
    # A command that meets a dropped connection is retried on a new one a few times
    # (a Redis restart, a failover); a longer outage fails the step, and the handler
    # runner redelivers it with a growing delay (shared/runtime/redelivery.py).
    common: dict[str, Any] = dict(
        decode_responses=False, retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        socket_connect_timeout=5.0, socket_timeout=COMMAND_TIMEOUT_S, socket_keepalive=True)
    common.update(options)
    if topology.cluster:
        # max_connections is per node here; a node's failure or a moved slot makes the
        # client read the cluster's slot map again (redis-py's own retries).
        urls = [u.strip() for u in topology.url.split(",") if u.strip()]
        first = urlsplit(urls[0])
        nodes = [ClusterNode(urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 6379) for u in urls]
        extra = {k: v for k, v in parse_url(urls[0]).items() if k in ("username", "password")}
        if first.scheme == "rediss":
            extra["ssl"] = True
        cluster = RedisCluster(startup_nodes=nodes, max_connections=max_connections, health_check_interval=30,
                               **{**extra, **common})
        return cluster  # type: ignore[return-value]
    if topology.sentinels:
        if not topology.sentinel_master:
            raise ValueError("Redis through Sentinel needs the master's name")
        master = {k: v for k, v in parse_url(topology.url).items() if k not in ("host", "port", "connection_class")}
        if urlsplit(topology.url).scheme == "rediss":
            master["ssl"] = True
        sentinel = Sentinel(topology.sentinels, sentinel_kwargs={
            "socket_connect_timeout": 2.0, "socket_timeout": 2.0, **topology.sentinel_options})
        return sentinel.master_for(topology.sentinel_master, max_connections=max_connections,
                                   health_check_interval=30, **{**master, **common})
    return aioredis.Redis.from_url(topology.url, max_connections=max_connections, health_check_interval=30, **common)


def is_cluster(redis: Any) -> bool:
    return isinstance(redis, RedisCluster)


async def answers(redis: Any) -> bool:
    """Whether Redis answers a PING: on a cluster every master (a replica that is down
    stops nobody's work)."""
    if is_cluster(redis):
        return bool(await redis.ping(target_nodes=RedisCluster.PRIMARIES))
    return bool(await redis.ping())


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
