"""The runtime's hooks (shared/runtime/hooks.py) are filled by the observability layer:
the work-chains gauge and the trace context of a work publish whose envelope has none."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.observability import metrics, tracing
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.stores.event_log import InMemoryEventLog

pytestmark = pytest.mark.unit


class _Nats:
    """What the bus asks of a connection for a work publish: an inbox, a subscription to
    it, a publish (kept here) and the stream's PubAck on that inbox."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, str]]] = []
        self._answer: Callable[[Any], Awaitable[None]] | None = None

    def jetstream(self, **options: Any) -> object:
        return object()

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str, cb: Callable[[Any], Awaitable[None]]) -> None:
        self._answer = cb

    async def publish(self, subject: str, payload: bytes, reply: str = "", headers: dict[str, str] | None = None) -> None:
        self.published.append((subject, dict(headers or {})))
        assert self._answer is not None
        await self._answer(SimpleNamespace(subject=reply, headers=None, data=b'{"stream": "WORK", "seq": 1}'))


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
    (_, headers), = nc.published
    assert headers["traceparent"].split("-")[1] == trace_id
    assert headers["Loopwire-Session-Id"] == "s1" and headers["Loopwire-Run-Id"] == "r1"
    await bus.publish_work("loopwire.work.memory.assemble", {"session_id": "s1"}, msg_id="m2")
    assert "traceparent" not in nc.published[1][1]  # outside any span there is none
