"""W3C trace context across hops: the `trace` field of envelopes and the NATS headers.

Every step of a run carries the run's traceparent (run_span.py draws it), so a span in any
service, in any replica, continues the run's trace. The publishing bus of the runtime
(runtime/bus.py) asks for the current context through its hook (runtime/hooks.py), which
this module fills when it is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context

from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.lru import LruCache


def inject_context(context: Context | None = None) -> dict[str, str]:
    """W3C ``traceparent``/``tracestate`` of the current span (or of `context`), for the
    `trace` field of envelopes and for NATS headers; {} when there is no valid span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


_EXTRACTED = LruCache[tuple[str | None, ...], Context](4096)
_W3C_FIELDS = ("traceparent", "tracestate", "baggage")


def extract_context(carrier: Mapping[str, str] | None) -> Context:
    """The context a carrier (envelope `trace` field, NATS headers) continues.

    With the default W3C propagators, kept per (traceparent, tracestate, baggage): a
    Context is immutable, every step of a run carries the run's one traceparent, and
    parsing it anew is most of what a span costs when none is recorded."""
    carrier = carrier or {}
    if not _w3c_only(propagate.get_global_textmap()):
        return propagate.extract(dict(carrier))  # other propagators read other headers
    key = tuple(carrier.get(field) for field in _W3C_FIELDS)
    found = _EXTRACTED.get(key)
    if found is None:
        found = propagate.extract({k: v for k, v in zip(_W3C_FIELDS, key, strict=True) if v is not None})
        _EXTRACTED.put(key, found)
    return found


_textmap_checked: tuple[Any, bool] = (None, False)


def _w3c_only(textmap: Any) -> bool:
    """Whether the propagator reads only the W3C fields (checked once per propagator)."""
    global _textmap_checked
    if _textmap_checked[0] is not textmap:
        _textmap_checked = (textmap, set(textmap.fields) <= set(_W3C_FIELDS))
    return _textmap_checked[1]


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside any trace."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def parent_context(parent: Context | Mapping[str, str] | None) -> Context | None:
    if parent is None or isinstance(parent, Context):
        return parent
    if not parent:  # an empty carrier: the sender had no trace, stay in ours
        return None
    return extract_context(parent)


HOOKS.trace_headers = inject_context
