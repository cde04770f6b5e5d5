"""The oldest servers loopwire starts on: versions read as nats-py and redis-py give them,
an older server refused with a message naming it and the minimum."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from nats.aio.client import ServerVersion

from loopwire.shared.runtime.server_versions import (
    UnsupportedServer,
    check_nats,
    check_redis,
    parse_version,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "parsed"), [("2.15.1", (2, 15, 1)), ("v2.9.10", (2, 9, 10)),
                                              ("7.0.15-beta", (7, 0, 15)), ("6.2", (6, 2, 0)), ("x", None)])
def test_versions_are_read(text: str, parsed: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == parsed


def nats_at(version: str) -> Any:
    return SimpleNamespace(connected_server_version=ServerVersion(version))


def test_nats_older_than_2_9_is_refused() -> None:
    check_nats(nats_at("2.9.10"))
    check_nats(nats_at("2.15.1"))
    check_nats(nats_at("0.0.0-unknown"))  # not connected yet: nothing to say
    with pytest.raises(UnsupportedServer, match=r"nats-server 2\.8\.4 .*2\.9\.0 or newer"):
        check_nats(nats_at("2.8.4"))


class RedisAnswering:
    def __init__(self, info: Any) -> None:
        self._info = info

    async def info(self, section: str) -> Any:
        assert section == "server"
        if isinstance(self._info, Exception):
            raise self._info
        return self._info


async def test_redis_older_than_6_2_is_refused_on_any_node() -> None:
    await check_redis(RedisAnswering({"redis_version": "6.2.5"}))
    await check_redis(RedisAnswering(ConnectionError("not up yet")))  # the services wait for it
    with pytest.raises(UnsupportedServer, match=r"Redis 6\.0\.16 .*6\.2\.0 or newer"):
        await check_redis(RedisAnswering({"redis_version": "6.0.16"}))
    cluster = {"127.0.0.1:7000": {"redis_version": "7.0.15"}, "127.0.0.1:7001": {"redis_version": "5.0.7"}}
    with pytest.raises(UnsupportedServer, match="Redis 5.0.7"):
        await check_redis(RedisAnswering(cluster))
