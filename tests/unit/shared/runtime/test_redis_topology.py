"""The Redis layouts of the settings (shared/runtime/credentials.py): one server, a cluster,
a master behind sentinels, with the operator's password and TLS on each, and how many
replicas a durable write waits for."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from loopwire.settings import Settings
from loopwire.shared.runtime.credentials import (
    CredentialsError,
    connect_configured_redis,
    redis_topology,
    wait_replicas,
)


def test_one_server_waits_for_no_replica_unless_asked() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:6379/0")
    assert not redis_topology(settings).replicated
    assert wait_replicas(settings) == 0
    assert wait_replicas(Settings(redis_wait_replicas=2)) == 2


async def test_a_cluster_takes_any_nodes_and_the_password() -> None:
    settings = Settings(redis_cluster=True, redis_url="redis://10.0.0.1:7000,redis://10.0.0.2:7001",
                        redis_password="cl-pw-4411")
    assert redis_topology(settings).replicated and wait_replicas(settings) == 1
    assert wait_replicas(Settings(redis_cluster=True, redis_wait_replicas=0)) == 0
    client = connect_configured_redis(settings)
    try:
        assert isinstance(client, RedisCluster)
        nodes = client.nodes_manager.startup_nodes
        assert set(nodes) == {"10.0.0.1:7000", "10.0.0.2:7001"}
        assert client.nodes_manager.connection_kwargs["password"] == "cl-pw-4411"
    finally:
        await client.aclose()


async def test_sentinels_name_the_master_with_their_own_password_and_the_masters_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = Settings(redis_sentinels="10.0.0.5:26379, 10.0.0.6:26379", redis_sentinel_master="lw",
                        redis_url="rediss://10.0.0.9/2", redis_password="m-pw-8812",
                        redis_sentinel_password="s-pw-9921", redis_tls_ca=str(ca))
    topology = redis_topology(settings)
    assert topology.sentinels == [("10.0.0.5", 26379), ("10.0.0.6", 26379)] and topology.sentinel_master == "lw"
    assert topology.sentinel_options == {"password": "s-pw-9921", "ssl": True, "ssl_ca_certs": str(ca)}
    assert wait_replicas(settings) == 1
    client = connect_configured_redis(settings)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["password"], kwargs["db"], kwargs["ssl_ca_certs"]) == ("m-pw-8812", 2, str(ca))
        assert "SSL" in client.connection_pool.connection_class.__name__
        sentinel = client.connection_pool.sentinel_manager
        assert sentinel.sentinel_kwargs["password"] == "s-pw-9921"
    finally:
        await client.aclose()


@pytest.mark.parametrize(("fields", "message"), [
    ({"redis_cluster": True, "redis_sentinels": "h:1", "redis_sentinel_master": "m"}, "not both"),
    ({"redis_sentinels": "h:1"}, "LOOPWIRE_REDIS_SENTINEL_MASTER"),
    ({"redis_sentinels": "no-port", "redis_sentinel_master": "m"}, "host:port"),
])
def test_contradictory_or_incomplete_layouts_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(CredentialsError, match=message):
        redis_topology(Settings(**fields))  # type: ignore[arg-type]
