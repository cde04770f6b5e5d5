"""The observer's Redis calls (services/memory/store.py): the lock with the state and the
recent observations in one round trip, a note and its progress mark in one script that
answers the state after it, the lock released by its owner only. On one server they go
through the process's script channel, on a Redis Cluster through redis-py; both agree."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from loopwire.memory.store import MemoryStore, ObservationState
from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis
from loopwire.testing.redis_cluster import RedisClusterHandle, start_redis_cluster

pytestmark = pytest.mark.integration

TTL = 600


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterHandle]:
    with start_redis_cluster(masters=3, replicas=0) as cluster:
        yield cluster


@pytest.fixture(params=["redis", "redis-cluster"])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "redis":
        client = connect_redis(request.getfixturevalue("redis_server").url)
    else:
        cluster: RedisClusterHandle = request.getfixturevalue("redis_cluster")
        client = connect_redis(RedisTopology(cluster.url, cluster=True))
    await client.flushdb()
    yield client
    await client.aclose()


async def test_an_observation_is_locked_read_written_and_released_in_few_round_trips(redis: Any) -> None:
    store = MemoryStore(redis, ttl_s=TTL)
    assert (store._channel is not None) == (type(redis).__name__ == "Redis"), "the channel only on one server"

    taken, state, earlier = await store.begin_observation("s1", "owner-a", ttl_s=30, recent=5)
    assert (taken, state, earlier) == (True, ObservationState(0, 0, 0), [])
    assert (await store.begin_observation("s1", "owner-b", ttl_s=30, recent=5))[0] is False, "held by owner-a"

    state = await store.add_observation("s1", {"text": "o1"}, None, usage=Usage(output_tokens=3), observed_to=6)
    assert state == ObservationState(observed_to=6, observations=1, reflected=0)
    state = await store.add_observation("s1", {"text": "o2"}, "actor-1", usage=Usage(input_tokens=2), observed_to=12)
    assert state == ObservationState(observed_to=12, observations=2, reflected=0)
    state = await store.add_reflection("s1", {"text": "r1"}, None, usage=Usage(), reflected=2)
    assert state == ObservationState(observed_to=12, observations=2, reflected=2)
    assert await store.observation_state("s1") == state
    assert [o["text"] for o in await store.observations("s1")] == ["o1", "o2"]
    assert [r["text"] for r in await store.reflections("s1")] == ["r1"]
    assert await store.claim_usage("s1", "r:g1") == Usage(input_tokens=2, output_tokens=3), "each note's cost"
    for what in ("obs", "refl", "meta"):
        assert 0 < await redis.ttl(keys.memory("s1", what)) <= TTL, f"{what} expires with the session"
    assert await redis.lrange(keys.actor_memory("actor-1", "obs"), 0, -1) != [], "the actor's copy"

    await store.unlock("s1", "observe", "owner-b")
    assert (await store.begin_observation("s1", "owner-b", ttl_s=30, recent=5))[0] is False, \
        "another owner's release leaves the lock as it was"
    await store.unlock("s1", "observe", "owner-a")
    taken, state, earlier = await store.begin_observation("s1", "owner-b", ttl_s=30, recent=1)
    assert (taken, state.observed_to, [o["text"] for o in earlier]) == (True, 12, ["o2"]), "the newest one"
    assert 0 < await redis.ttl(keys.memory_lock("s1", "observe")) <= 30


async def test_a_note_without_a_session_ttl_keeps_its_keys(redis: Any) -> None:
    store = MemoryStore(redis)  # ttl 0: the keys do not expire
    await store.add_observation("s2", {"text": "o"}, None, usage=Usage(output_tokens=1), observed_to=2)
    assert await redis.ttl(keys.memory("s2", "obs")) == -1
    assert await redis.ttl(keys.memory("s2", "meta")) == -1
