"""loopwire on a Redis master behind three sentinels (a replica), in the layout users deploy:
one `loopwire serve` process per service, two routers (LOOPWIRE_REDIS_SENTINELS,
LOOPWIRE_REDIS_SENTINEL_MASTER). The master is killed (-9) while tools run: the sentinels
promote the replica, the services follow them to it, every run completes and no tool
call is made twice (the provider counts the calls by `Loopwire-Tool-Use-Id`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from loopwire.testing import LoopwireContainer
from loopwire.testing.redis_cluster import RedisSentinelHandle, start_redis_sentinel
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import started_system
from .failover import failover_mid_tool

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SESSIONS = 8


@pytest.fixture(scope="module")
def redis_sentinel() -> Iterator[RedisSentinelHandle]:
    with start_redis_sentinel(replicas=1, sentinels=3) as sentinel:
        yield sentinel


@pytest.fixture(scope="module")
def sentinel_system(fake_anthropic: FakeAnthropic, redis_sentinel: RedisSentinelHandle) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout="split", servers={"redis_sentinel": redis_sentinel}) as system:
        yield system


@pytest.mark.timeout(240)
async def test_a_sentinel_failover_mid_tool_loses_no_run_and_repeats_no_call(
        sentinel_system: LoopwireContainer, redis_sentinel: RedisSentinelHandle, fake: FakeAnthropic) -> None:
    old = redis_sentinel.master()

    async def kill() -> float:
        redis_sentinel.kill_master()
        return await asyncio.to_thread(redis_sentinel.wait_failover, old)

    promoted_s, recovered_s = await failover_mid_tool(sentinel_system, fake, [f"sentinel-{n}" for n in range(SESSIONS)],
                                                      kill)
    await asyncio.to_thread(redis_sentinel.restart, old)  # the sentinels make it the new master's replica
    print(f"\n[redis-sentinel] master {old.address} killed: replica promoted after {promoted_s:.1f} s, "
          f"every run ended {recovered_s:.1f} s after the kill")
