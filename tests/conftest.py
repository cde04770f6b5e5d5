"""Shared fixtures: real nats-server (JetStream) and redis-server on free ports.

No test reaches a real model API: ANTHROPIC_API_KEY is removed for the whole run, and
the llm path is tested against tests/fakes/anthropic_server.py.
"""

from __future__ import annotations

import asyncio
import gc
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.shared.observability import tracing
from loopwire.shared.observability.tracing import spans as tracing_spans
from loopwire.testing.servers import ServerHandle, start_nats, start_redis
from tests.agent_binaries import check_installed
from tests.loop_errors import LostErrors
from tests.paths import TESTS

TIERS = ("unit", "integration", "e2e")
"""The folders of tests/ that are tiers; each test in one carries its marker."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    check_installed(item)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder is the tier: every test under tests/unit is marked `unit`, under
    tests/integration `integration`, under tests/e2e `e2e` (so `-m unit` is exactly
    tests/unit); a test marked for another tier than its folder's is refused. Before
    `-m` deselects (tryfirst)."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        tier = parts[0] if len(parts) > 1 and parts[0] in TIERS else None
        if tier is None:
            continue
        marked = {mark.name for mark in item.iter_markers()} & set(TIERS)
        if marked - {tier}:
            raise pytest.UsageError(f"{item.nodeid} is under tests/{tier} but marked {', '.join(sorted(marked))}: "
                                    "move it to the folder of its tier")
        if tier not in marked:
            item.add_marker(tier)

os.environ.pop("ANTHROPIC_API_KEY", None)
os.environ.pop("ANTHROPIC_BASE_URL", None)
# The tests' placeholder model ids cost nothing, as an operator would price a model of
# their own with LOOPWIRE_PRICES (the services run in process read it through their
# settings; the core's unit tests pass the same table in CoreConfig, tests/router_driver.py);
# an unpriced model (cost_usd null and a `warning`) is tested on its own
# (tests/unit/router/test_pricing.py). Processes the tests start get their own env.
os.environ["LOOPWIRE_PRICES"] = '{"m1": {"input": 0, "output": 0}, "m2": {"input": 0, "output": 0}}'


@pytest.fixture(scope="session")
def nats_server() -> Iterator[ServerHandle]:
    handle = start_nats()
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ServerHandle]:
    handle = start_redis()
    yield handle
    handle.stop()


@pytest.fixture
def prefix() -> str:
    """A subject prefix of this test's own, so streams and subjects never collide."""
    return f"lwt{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def unretrieved_errors() -> AsyncIterator[LostErrors]:
    """What the running loop reports as "Future exception was never retrieved", looked up
    when the test asks: after a garbage collection, which is when asyncio reports it."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def lost() -> list[dict[str, object]]:
        gc.collect()
        await asyncio.sleep(0)
        return [c for c in reported if "never retrieved" in str(c.get("message"))]

    try:
        yield lost
    finally:
        loop.set_exception_handler(previous)


@pytest.fixture
async def redis_client(redis_server: ServerHandle) -> AsyncIterator[object]:
    from loopwire.shared.stores.redis_connection import connect_redis

    client = connect_redis(redis_server.url)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """loopwire's spans in an in-memory exporter, through the same provider set-up as
    production (the run-trace id generator, the redacting wrapper, content capture off)."""
    monkeypatch.setattr(tracing_spans, "_capture_content", False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=tracing.RunIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    yield exporter
    tracing.set_tracer_provider(None)
    provider.shutdown()
