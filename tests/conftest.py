"""Shared fixtures: real nats-server (JetStream) and redis-server on free ports.

No test reaches a real model API: ANTHROPIC_API_KEY is removed for the whole run, and
the llm path is tested against tests/fakes/anthropic_server.py.
"""

from __future__ import annotations

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

os.environ.pop("ANTHROPIC_API_KEY", None)
os.environ.pop("ANTHROPIC_BASE_URL", None)
# The unit tests' placeholder model ids cost nothing, as an operator would price a model
# of their own with LOOPWIRE_PRICES; an unpriced model (cost_usd null and a `warning`) is
# tested on its own (tests/test_pricing.py). Processes the tests start get their own env.
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
