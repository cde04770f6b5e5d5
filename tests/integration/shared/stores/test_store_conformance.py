"""One conformance suite, every backend: the in-memory stores and the Redis stores pass the
checks of loopwire.testing.store_conformance (the langgraph checkpoint-conformance idea),
each optional capability where the backend declares it and its refusal where it does not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.event_log import InMemoryEventLog, RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.session_store import InMemorySessionStore, RedisSessionStore
from loopwire.shared.stores.step_store import InMemoryStepStore, RedisStepStore
from loopwire.testing.store_conformance import CHECKS, Backend, Check

pytestmark = pytest.mark.integration


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield Backend("memory", InMemorySessionStore(), InMemoryStepStore(), InMemoryEventLog())
        return
    server = request.getfixturevalue("redis_server")
    redis = connect_redis(server.url)
    await redis.flushdb()
    yield Backend("redis", RedisSessionStore(redis), RedisStepStore(redis, ttl_s=60), RedisEventLog(redis), redis)
    await redis.aclose()


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_store_conformance(backend: Backend, check: Check) -> None:
    await check(backend)


async def test_each_backend_declares_what_it_offers(backend: Backend) -> None:
    """The capabilities the services ask for: Redis offers them all, memory none (so its
    checks above are those of the refusal)."""
    offered = {c for c in Capability
               if backend.sessions.supports(c) or backend.events.supports(c) or backend.steps.supports(c)}
    assert offered == (set(Capability) if backend.name == "redis" else set())
