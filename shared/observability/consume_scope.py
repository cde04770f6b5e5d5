"""What every consumed JetStream work message gets from the observability layer.

The work consumers read JetStream with nats-py (shared/runtime/work_consumer.py), not
through FastStream, so FastStream's middlewares do not see their messages. This scope
gives each one what those middlewares give a FastStream handler, at a fraction of the
cost (docs/architecture.md, "The consume path"):

- the log context (`Loopwire-Session-Id` / `Loopwire-Run-Id` headers, or the session id
  of an ingress subject) and the message's trace context, as ContextMiddleware does;
- the redelivery counter per consumer;
- FastStream's message-level metrics, the same series (`loopwire_faststream_received_*`,
  labelled by the subject with any session id masked: message_metrics.py);
- where the process exports traces, a CONSUMER span `<subject> process` parented by the
  message's `traceparent`, as FastStream's NatsTelemetryMiddleware makes.

The runtime calls it through its hook (runtime/hooks.py, `HOOKS.consume_scope`), filled
in here when the observability layer is imported.
"""

from __future__ import annotations

import time
from typing import Any

from faststream.prometheus.container import MetricsContainer
from opentelemetry import context as otel_context
from opentelemetry import trace

from loopwire.shared.contract.headers import RUN_HEADER, SESSION_HEADER
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.lru import LruCache

from . import metrics
from .context_middleware import note_delivery, session_from_subject
from .logs import run_id_var, session_id_var
from .message_metrics import subject_pattern
from .tracing import setup as tracing_setup
from .tracing.propagation import extract_context

_container: MetricsContainer | None = None


def _metrics() -> MetricsContainer:
    """FastStream's metric families of message_metrics.py (the same registry and prefix:
    a second container finds the families already registered and shares them)."""
    global _container
    if _container is None:
        _container = MetricsContainer(metrics.REGISTRY, metrics_prefix="loopwire_faststream", custom_label_names=())
    return _container


class _Series:
    """The metric children of one handler label, looked up once."""

    __slots__ = ("duration", "exceptions", "in_process", "processed", "received", "size")

    def __init__(self, handler: str) -> None:
        c = _metrics()
        labels = {"app_name": "loopwire", "broker": "nats", "handler": handler}
        self.received = c.received_messages_total.labels(**labels)
        self.size = c.received_messages_size_bytes.labels(**labels)
        self.in_process = c.received_messages_in_process.labels(**labels)
        self.duration = c.received_processed_messages_duration_seconds.labels(**labels)
        self.processed = {status: c.received_processed_messages_total.labels(**labels, status=status)
                          for status in ("acked", "nacked", "rejected", "error")}
        self.exceptions = c.received_processed_messages_exceptions_total
        """Labelled by exception type as well: children taken when one happens."""


_SERIES = LruCache[str, _Series](256)
_BY_SUBJECT = LruCache[str, _Series](256)
"""The series of a subject as it came (a work consumer's is always the same one), so a
message costs one lookup instead of masking its subject first."""


def _series(subject: str) -> _Series:
    found = _BY_SUBJECT.get(subject)
    if found is not None:
        return found
    handler = subject_pattern(subject)
    found = _SERIES.get(handler)
    if found is None:
        found = _Series(handler)
        _SERIES.put(handler, found)
    _BY_SUBJECT.put(subject, found)
    return found


class ConsumeScope:
    """The scope of one work message's handling (a sync context manager: nothing in it
    awaits). `root.outcome` says at exit how the message was settled, if it was.

    On entry only what the handler's own code reads (the log and trace context) and the
    in-process gauge; the message is counted (received, its size, its delivery) at exit,
    with its outcome. A hop's handler hands its work on long before it exits (the next
    hop's publish, then the wait for its acknowledgement), so the counting is off the
    hop's path: in a process woken for one message, each family touched before that
    publish costs tens of µs (docs/bench-notes/history.md)."""

    __slots__ = ("_root", "_series", "_session", "_run", "_context", "_span", "_t0")

    def __init__(self, root: Any) -> None:
        self._root = root

    def __enter__(self) -> ConsumeScope:
        raw = self._root.raw_message
        headers = raw.headers or {}
        subject = raw.subject
        sid = headers.get(SESSION_HEADER) or session_from_subject(subject)
        self._session = session_id_var.set(sid)
        self._run = run_id_var.set(headers.get(RUN_HEADER))
        parent = extract_context(headers) if "traceparent" in headers else None
        self._span = None
        tracer = tracing_setup.exporting_tracer()
        if tracer is not None:
            self._span = tracer.start_span(
                f"{subject} process", context=parent, kind=trace.SpanKind.CONSUMER,
                attributes={"messaging.system": "nats", "messaging.operation": "process",
                            "messaging.destination_publish.name": subject,
                            "messaging.message.id": headers.get("Nats-Msg-Id", ""),
                            "messaging.message.payload_size_bytes": len(raw.data)})
            parent = trace.set_span_in_context(self._span, parent)
        self._context = otel_context.attach(parent) if parent is not None else None
        series = self._series = _series(subject)
        series.in_process.inc()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        series = self._series
        series.duration.observe(time.perf_counter() - self._t0)
        series.in_process.dec()
        raw = self._root.raw_message
        meta = self._root.metadata
        note_delivery(meta.consumer, meta.num_delivered)
        series.received.inc()
        series.size.observe(len(raw.data))
        if exc_type is not None:
            metrics.child(series.exceptions, app_name="loopwire", broker="nats", handler=subject_pattern(
                self._root.raw_message.subject), exception_type=exc_type.__name__).inc()
            series.processed["error"].inc()
        else:
            series.processed[self._root.outcome or "acked"].inc()
        if self._span is not None:
            if exc is not None:
                self._span.record_exception(exc)
            self._span.end()
        if self._context is not None:
            otel_context.detach(self._context)
        run_id_var.reset(self._run)
        session_id_var.reset(self._session)


HOOKS.consume_scope = ConsumeScope
