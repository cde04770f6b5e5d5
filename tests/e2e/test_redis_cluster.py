"""loopwire on a 3-master Redis Cluster (a replica each), in the layout users deploy: one
`loopwire serve` process per service, two routers (LOOPWIRE_REDIS_CLUSTER=true).

- Sessions spread their keys over the masters (each session's in one slot) and complete.
- The master holding the most keys is killed (-9) while tools run: its replica is promoted,
  every run completes, and no tool call is made twice (the provider counts the calls by
  `Loopwire-Tool-Use-Id`); each transcript keeps strictly increasing seqs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from redis.asyncio.cluster import RedisCluster

from loopwire.shared.contract import keys
from loopwire.testing import LoopwireContainer
from loopwire.testing.redis_cluster import RedisClusterHandle, start_redis_cluster
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .failover import echo_each_session, failover_mid_tool, run_sessions, transcripts_hold

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = 12


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterHandle]:
    with start_redis_cluster(masters=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster_system(fake_anthropic: FakeAnthropic, redis_cluster: RedisClusterHandle) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout="split", servers={"redis_cluster": redis_cluster}) as system:
        yield system


async def session_masters(cluster: RedisClusterHandle, sids: list[str]) -> dict[str, str]:
    """Session -> the master (`host:port`) holding its keys, from a cluster client's slot map."""
    client = RedisCluster.from_url(cluster.masters()[0].url)
    try:
        await client.initialize()
        return {sid: client.get_node_from_key(keys.session_state(sid)).name for sid in sids}
    finally:
        await client.aclose()


@pytest.mark.timeout(180)
async def test_sessions_spread_over_the_masters_and_complete(
        cluster_system: LoopwireContainer, redis_cluster: RedisClusterHandle, fake: FakeAnthropic) -> None:
    async with connected(cluster_system) as nc:
        provider, svc = await serve_tools(nc)
        await wait_for_tools(nc, {"slow_echo"})
        echo_each_session(fake)
        sids = [f"spread-{n}" for n in range(SESSIONS)]
        await run_sessions(nc, sids, timeout=90)
        await transcripts_hold(nc, sids, provider)
        await svc.stop()
    assert len(set((await session_masters(redis_cluster, sids)).values())) >= 2
    held = redis_cluster.keys_per_master()
    assert sum(1 for count in held.values() if count > 0) >= 2, held


@pytest.mark.timeout(240)
async def test_the_busiest_master_killed_mid_tool_loses_no_run_and_repeats_no_call(
        cluster_system: LoopwireContainer, redis_cluster: RedisClusterHandle, fake: FakeAnthropic) -> None:
    sids = [f"kill-master-{n}" for n in range(SESSIONS)]
    victim = redis_cluster.busiest_master()

    async def kill() -> float:
        nonlocal victim
        victim = redis_cluster.busiest_master()
        on_victim = [sid for sid, master in (await session_masters(redis_cluster, sids)).items()
                     if master == victim.address]
        assert on_victim, "the killed master holds sessions in their tool call"
        redis_cluster.kill(victim)
        return await asyncio.to_thread(redis_cluster.wait_promoted, victim)

    promoted_s, recovered_s = await failover_mid_tool(cluster_system, fake, sids, kill)
    await asyncio.to_thread(redis_cluster.restart, victim)  # back as a replica, for what follows
    await asyncio.to_thread(redis_cluster.wait_ready)
    print(f"\n[redis-cluster] master {victim.address} killed: replica promoted after {promoted_s:.1f} s, "
          f"every run ended {recovered_s:.1f} s after the kill")
