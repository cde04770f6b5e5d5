"""Who a message is about, for every line a handler logs and every span it opens.

Work envelopes travel with headers `Loopwire-Session-Id`, `Loopwire-Run-Id` and the W3C
`traceparent` (set by Bus.publish_work); ingress carries the session id in its subject.
This FastStream middleware puts them in the logging context variables and attaches the
trace context for the duration of the handler, so services need not repeat it.
"""

from __future__ import annotations

from typing import Any

from faststream import BaseMiddleware
from opentelemetry import context as otel_context

from loopwire.shared.contract.headers import RUN_HEADER, SESSION_HEADER
from loopwire.shared.observability import metrics
from loopwire.shared.observability.logs import log_context
from loopwire.shared.observability.tracing.propagation import extract_context


def session_from_subject(subject: str) -> str | None:
    """`<prefix>.in.<sid>.<verb>` or `<prefix>.out.<sid>.<kind...>` -> sid."""
    parts = subject.split(".")
    for marker in ("in", "out"):
        if marker in parts[:-1]:
            index = parts.index(marker)
            if index + 1 < len(parts):
                return parts[index + 1]
    return None


def note_delivery(consumer: str | None, num_delivered: int) -> None:
    """Redeliveries per consumer, for every JetStream consumer in one place."""
    consumer = consumer or "unknown"
    # Durable names carry the subject prefix (`<prefix>_router_ingress`); the label is
    # the part after it, so label values stay few.
    metrics.note_delivery(consumer.split("_", 1)[-1] if "_" in consumer else consumer, num_delivered)


def _note_delivery(raw: Any) -> None:
    if raw is None or not getattr(raw, "reply", "").startswith("$JS.ACK."):
        return  # a core message: no delivery count
    try:
        meta = raw.metadata
    except Exception:  # not a JetStream message after all
        return
    note_delivery(meta.consumer, meta.num_delivered)


class ContextMiddleware(BaseMiddleware):
    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        _note_delivery(getattr(msg, "raw_message", None))
        headers = msg.headers or {}
        sid = headers.get(SESSION_HEADER)
        if sid is None:
            raw = getattr(msg, "raw_message", None)
            subject = getattr(raw, "subject", None)
            sid = session_from_subject(subject) if isinstance(subject, str) else None
        token = None
        if "traceparent" in headers:
            token = otel_context.attach(extract_context(headers))
        try:
            with log_context(session_id=sid, run_id=headers.get(RUN_HEADER)):
                return await call_next(msg)
        finally:
            if token is not None:
                otel_context.detach(token)
