"""The exporter wrapper that redacts every span once more before it leaves the process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event as _Event
from opentelemetry.sdk.trace import ReadableSpan as _ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

from loopwire.shared.contract.redaction import redact_text


class RedactingSpanExporter(SpanExporter):
    """Wraps an exporter; every attribute, event attribute and status message it exports
    goes through :func:`redact` first (a backstop for attributes set outside our helpers)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return self.inner.export([_redacted_copy(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _redact_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        if isinstance(value, str):
            out[key] = redact_text(value)
        elif isinstance(value, tuple | list) and value and isinstance(value[0], str):
            out[key] = tuple(redact_text(v) for v in value)
        else:
            out[key] = value
    return out


def _redacted_copy(span: Any) -> Any:
    status = span.status
    if status.description:
        status = Status(status.status_code, redact_text(status.description))
    return _ReadableSpan(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=_redact_attrs(span.attributes),
        events=[_Event(e.name, _redact_attrs(e.attributes), e.timestamp) for e in span.events],
        links=span.links, kind=span.kind, status=status, start_time=span.start_time,
        end_time=span.end_time, instrumentation_scope=span.instrumentation_scope,
    )
