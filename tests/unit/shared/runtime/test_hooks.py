"""The runtime's hooks (shared/runtime/hooks.py) are filled by the observability layer:
the work-chains gauge and the trace context of a work publish whose envelope has none."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.observability import metrics, tracing
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.stores.event_log import InMemoryEventLog

pytestmark = pytest.mark.unit


class _JetStream:
    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, str]]] = []

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        self.published.append((subject, headers))


class _Nats:
    def __init__(self) -> None:
        self.js = _JetStream()

    def jetstream(self, **options: Any) -> _JetStream:
        return self.js


def test_importing_observability_fills_the_hooks() -> None:
    assert HOOKS.trace_headers is tracing.inject_context
    before = metrics.WORK_CHAINS._value.get()
    HOOKS.chain_opened()
    assert metrics.WORK_CHAINS._value.get() == before + 1
    HOOKS.chain_closed()
    assert metrics.WORK_CHAINS._value.get() == before


async def test_a_publish_without_a_trace_carries_the_current_span(spans: InMemorySpanExporter) -> None:
    nc: Any = _Nats()
    bus = Bus(nc, Subjects("loopwire"), InMemoryEventLog())
    with tracing.invoke_agent_span("agentic", "s1") as span:
        await bus.publish_work("loopwire.work.memory.assemble", {"session_id": "s1", "run_id": "r1"}, msg_id="m1")
    trace_id = format(span.get_span_context().trace_id, "032x")
    (_, headers), = nc.js.published
    assert headers["traceparent"].split("-")[1] == trace_id
    assert headers["Loopwire-Session-Id"] == "s1" and headers["Loopwire-Run-Id"] == "r1"
    await bus.publish_work("loopwire.work.memory.assemble", {"session_id": "s1"}, msg_id="m2")
    assert "traceparent" not in nc.js.published[1][1]  # outside any span there is none
