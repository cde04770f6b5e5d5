"""Writes a failover must not lose (shared/stores/replication.py), on a real Redis Cluster and
a real Sentinel setup: a record is on the replica when its write returns, a master whose
replica is gone stops waiting after one short WAIT and waits again once it is back, and
what was written before a failover is read after it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis

from loopwire.shared.contract import keys
from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis
from loopwire.shared.stores.replication import Replication
from loopwire.shared.stores.session_store import RedisSessionStore
from loopwire.shared.stores.step_store import RedisStepStore
from loopwire.testing.redis_cluster import (
    RedisClusterHandle,
    RedisNode,
    start_redis_cluster,
    start_redis_sentinel,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterHandle]:
    with start_redis_cluster(masters=3, replicas=1) as handle:
        yield handle


def replica_of(cluster: RedisClusterHandle, master: RedisNode) -> RedisNode:
    for node in cluster.nodes:
        role = node.call("ROLE") if node.running else None
        if role and role[0] == "slave" and int(role[2]) == master.port:
            return node
    raise AssertionError(f"no replica of {master.address}")


def read_on_replica(node: RedisNode, key: str) -> bytes | None:
    with redis.Redis(host="127.0.0.1", port=node.port) as r:
        r.execute_command("READONLY")
        value: bytes | None = r.get(key)
        return value


async def test_a_record_is_on_the_replica_when_its_write_returns(cluster: RedisClusterHandle) -> None:
    client = connect_redis(RedisTopology(cluster.url, cluster=True))
    replication = Replication(client, replicas=1, timeout_ms=2000)
    steps = RedisStepStore(client, ttl_s=60, replication=replication)
    await client.initialize()
    try:
        for n in range(20):
            name = keys.tool_call_step(f"rep-{n}", "toolu_1")
            await steps.put(name, {"n": n})
            master = cluster.node(client.get_node_from_key(keys.step_record(name)).name)
            # WAIT returned: the replica has it, whatever its master does next.
            assert read_on_replica(replica_of(cluster, master), keys.step_record(name)) is not None
        assert not replication.unreplicated(), "every WAIT was acknowledged"
    finally:
        await client.aclose()


async def test_a_master_without_its_replica_stops_waiting_and_waits_again_when_it_is_back(
        cluster: RedisClusterHandle) -> None:
    client = connect_redis(RedisTopology(cluster.url, cluster=True))
    replication = Replication(client, replicas=1, timeout_ms=300, probe_every_s=0.5)
    events = RedisEventLog(client, replication=replication)
    sid = "rep-lonely"
    await client.initialize()
    master = cluster.node(client.get_node_from_key(keys.event_seq(sid)).name)
    replica = cluster.kill(replica_of(cluster, master))
    try:
        started = time.monotonic()
        await events.append(sid, {"kind": "a", "run_id": None}, "k1")
        assert time.monotonic() - started >= 0.3, "the first write waited for the replica"
        started = time.monotonic()
        for n in range(10):
            await events.append(sid, {"kind": "b", "run_id": None}, f"k{n + 2}")
        assert time.monotonic() - started < 0.3 * 5, "then the master's writes went on without waiting"
        assert await events.last_seq(sid) == 11
        cluster.restart(replica)
        deadline = time.monotonic() + 20
        while replication.unreplicated() and time.monotonic() < deadline:
            await events.append(sid, {"kind": "c", "run_id": None}, None, store=False)
            await asyncio.sleep(0.2)
        assert not replication.unreplicated(), "the probe found the replica back: writes wait again"
    finally:
        if not replica.running:
            cluster.restart(replica)
        cluster.wait_ready()
        await client.aclose()


async def test_behind_sentinels_what_was_written_before_a_failover_is_read_after_it() -> None:
    with start_redis_sentinel(replicas=1, sentinels=3) as sentinel:
        topology = RedisTopology(sentinel.url, sentinels=[("127.0.0.1", n.port) for n in sentinel.sentinel_nodes],
                                 sentinel_master=sentinel.master_name)
        client = connect_redis(topology)
        replication = Replication(client, replicas=1, timeout_ms=2000)
        sessions = RedisSessionStore(client, replication=replication)
        events = RedisEventLog(client, replication=replication)
        try:
            for n in range(10):
                assert await sessions.commit(f"sen-{n}", 0, {"n": n}, history_len_before=0, append=[{"role": "user", "content": str(n)}])
                await events.append(f"sen-{n}", {"kind": "a", "run_id": None}, "k1")
            old = sentinel.kill_master()
            await asyncio.to_thread(sentinel.wait_failover, old)
            deadline = time.monotonic() + 20
            while True:  # the client finds the new master through the sentinels
                try:
                    assert await sessions.load("sen-3") == ({"n": 3}, 1)
                    break
                except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                    assert time.monotonic() < deadline, "the new master never answered"
                    await asyncio.sleep(0.2)
            for n in range(10):
                assert await sessions.load(f"sen-{n}") == ({"n": n}, 1)
                assert await events.last_seq(f"sen-{n}") == 1
                appended, _ = await events.append(f"sen-{n}", {"kind": "b", "run_id": None}, "k2")
                assert appended["seq"] == 2, "no seq is given twice after the failover"
        finally:
            await client.aclose()
