"""One conformance suite, every backend: the in-memory stores and the Redis stores pass the
checks of loopwire.testing.store_conformance (the langgraph checkpoint-conformance idea),
each optional capability where the backend declares it and its refusal where it does not.
The Redis stores pass them on one server and on a 3-master Redis Cluster, there with every
record, commit and seq waiting for its master's replica (shared/stores/replication.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.event_log import InMemoryEventLog, RedisEventLog
from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis
from loopwire.shared.stores.replication import Replication
from loopwire.shared.stores.session_store import InMemorySessionStore, RedisSessionStore
from loopwire.shared.stores.step_store import InMemoryStepStore, RedisStepStore
from loopwire.testing.redis_cluster import RedisClusterHandle, start_redis_cluster
from loopwire.testing.store_conformance import CHECKS, Backend, Check

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterHandle]:
    with start_redis_cluster(masters=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield Backend("memory", InMemorySessionStore(), InMemoryStepStore(), InMemoryEventLog())
        return
    if request.param == "redis":
        redis = connect_redis(request.getfixturevalue("redis_server").url)
        replication = Replication(redis)
    else:
        cluster: RedisClusterHandle = request.getfixturevalue("redis_cluster")
        redis = connect_redis(RedisTopology(cluster.url, cluster=True))
        replication = Replication(redis, replicas=1, timeout_ms=2000)
    await redis.flushdb()
    yield Backend(request.param, RedisSessionStore(redis, replication=replication),
                  RedisStepStore(redis, ttl_s=60, replication=replication), RedisEventLog(redis, replication=replication),
                  redis)
    await redis.aclose()


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_store_conformance(backend: Backend, check: Check) -> None:
    await check(backend)


async def test_each_backend_declares_what_it_offers(backend: Backend) -> None:
    """The capabilities the services ask for: Redis offers them all, memory none (so its
    checks above are those of the refusal)."""
    offered = {c for c in Capability
               if backend.sessions.supports(c) or backend.events.supports(c) or backend.steps.supports(c)}
    assert offered == (set() if backend.name == "memory" else set(Capability))
