"""GenAI spans: ``invoke_agent {profile}`` (INTERNAL), ``chat {model}`` (CLIENT), ``execute_tool
{tool}`` (INTERNAL), with the gen_ai.* attributes of OpenTelemetry's GenAI semantic
conventions, and events on the current span (:func:`add_span_event`).

Without a provider the helpers hand out non-recording spans that still carry an incoming
traceparent along, so trace ids stay continuous (and in the logs) at near-zero cost.

Privacy: message contents (prompts, completions, tool arguments and results) are recorded
only when ``LOOPWIRE_OTEL_CAPTURE_CONTENT=true``. Everything recorded goes through
`redact` (contract/redaction.py).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from loopwire.shared.contract.redaction import redact, redact_text

from .propagation import parent_context
from .setup import get_tracer, recording

PROVIDER_ANTHROPIC = GA.GenAiProviderNameValues.ANTHROPIC.value
MAX_CONTENT_CHARS = 16 * 1024
"""Recorded content longer than this is truncated (a span is not a transcript)."""

_capture_content = False


def set_capture_content(on: bool) -> None:
    """Allow (or forbid) recording message contents; the launcher sets it from
    ``LOOPWIRE_OTEL_CAPTURE_CONTENT`` (RuntimeSettings.otel_capture_content). Off until then, so
    an application embedding loopwire records no contents unless it asks."""
    global _capture_content
    _capture_content = on


def capture_content() -> bool:
    """Whether message contents may be recorded."""
    return _capture_content


class _CarriedSpan:
    """What a span helper hands out while no spans are recorded: the parent's span,
    non-recording, made current (what the API's no-op tracer does, without its machinery),
    so log lines and `inject_context` keep the run's trace. A class rather than a
    generator: a tool-turn opens four of these, and `contextmanager`'s machinery cost as
    much as the rest of it."""

    __slots__ = ("_parent", "_token")

    def __init__(self, parent: Context | Mapping[str, str] | None) -> None:
        self._parent = parent
        self._token: object = None

    def __enter__(self) -> Span:
        span = trace.get_current_span(parent_context(self._parent))
        if not isinstance(span, trace.NonRecordingSpan):
            span = trace.NonRecordingSpan(span.get_span_context())
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]


@contextmanager
def _recorded_span(name: str, kind: SpanKind, parent: Context | Mapping[str, str] | None,
                   *, attributes: dict[str, Any]) -> Iterator[Span]:
    with get_tracer().start_as_current_span(
        name, context=parent_context(parent), kind=kind,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        if span.is_recording():
            span.set_attributes(clean_attributes(attributes))
        try:
            yield span
        except asyncio.CancelledError:
            # Cancelling is how steer and abort stop work: not a failure of the span.
            if span.is_recording():
                span.add_event("cancelled")
            raise
        except Exception as exc:
            _record_error(span, exc)
            raise


def invoke_agent_span(profile: str, conversation_id: str, *, run_id: str | None = None,
                      provider: str = PROVIDER_ANTHROPIC,
                      parent: Context | Mapping[str, str] | None = None) -> AbstractContextManager[Span]:
    """``invoke_agent {profile}``: one agent run (or the router's handling of it)."""
    if not recording():
        return _CarriedSpan(parent)
    return _recorded_span(f"invoke_agent {profile}", SpanKind.INTERNAL, parent, attributes={
        GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.INVOKE_AGENT.value,
        GA.GEN_AI_PROVIDER_NAME: provider,
        GA.GEN_AI_AGENT_NAME: profile,
        GA.GEN_AI_CONVERSATION_ID: conversation_id,
        "loopwire.run_id": run_id,
    })


def chat_span(model: str, *, conversation_id: str | None = None, max_tokens: int | None = None,
              temperature: float | None = None, system: Any = None, messages: Any = None,
              provider: str = PROVIDER_ANTHROPIC,
              parent: Context | Mapping[str, str] | None = None) -> AbstractContextManager[Span]:
    """``chat {model}`` (CLIENT): one model request. `system` and `messages` are recorded
    (redacted, truncated) only when content capture is on."""
    if not recording():
        return _CarriedSpan(parent)
    attrs: dict[str, Any] = {
        GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.CHAT.value,
        GA.GEN_AI_PROVIDER_NAME: provider,
        GA.GEN_AI_REQUEST_MODEL: model,
        GA.GEN_AI_REQUEST_MAX_TOKENS: max_tokens,
        GA.GEN_AI_REQUEST_TEMPERATURE: temperature,
        GA.GEN_AI_CONVERSATION_ID: conversation_id,
    }
    if capture_content():
        attrs[GA.GEN_AI_SYSTEM_INSTRUCTIONS] = _content(system)
        attrs[GA.GEN_AI_INPUT_MESSAGES] = _content(messages)
    return _recorded_span(f"chat {model}", SpanKind.CLIENT, parent, attributes=attrs)


def record_chat_response(span: Span, *, response_model: str | None = None, response_id: str | None = None,
                         finish_reasons: Sequence[str | None] = (), input_tokens: int | None = None,
                         output_tokens: int | None = None, cache_read_input_tokens: int = 0,
                         cache_creation_input_tokens: int = 0, time_to_first_chunk_s: float | None = None,
                         output_messages: Any = None) -> None:
    """Put the response on a chat span. Pass Anthropic's usage fields as they come:
    gen_ai.usage.input_tokens is recorded as input + cache read + cache creation."""
    if not span.is_recording():
        return
    total_input = None if input_tokens is None else input_tokens + cache_read_input_tokens + cache_creation_input_tokens
    attrs: dict[str, Any] = {
        GA.GEN_AI_RESPONSE_MODEL: response_model,
        GA.GEN_AI_RESPONSE_ID: response_id,
        GA.GEN_AI_RESPONSE_FINISH_REASONS: [r for r in finish_reasons if r] or None,
        GA.GEN_AI_USAGE_INPUT_TOKENS: total_input,
        GA.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        GA.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cache_read_input_tokens or None,
        GA.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: cache_creation_input_tokens or None,
        GA.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: time_to_first_chunk_s,
    }
    if output_messages is not None and capture_content():
        attrs[GA.GEN_AI_OUTPUT_MESSAGES] = _content(output_messages)
    span.set_attributes(clean_attributes(attrs))


def execute_tool_span(tool_name: str, tool_call_id: str, *, arguments: Any = None,
                      conversation_id: str | None = None,
                      parent: Context | Mapping[str, str] | None = None) -> AbstractContextManager[Span]:
    """``execute_tool {tool}``: one tool call. `arguments` are recorded only when content
    capture is on."""
    if not recording():
        return _CarriedSpan(parent)
    attrs: dict[str, Any] = {
        GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.EXECUTE_TOOL.value,
        GA.GEN_AI_TOOL_NAME: tool_name,
        GA.GEN_AI_TOOL_CALL_ID: tool_call_id,
        GA.GEN_AI_TOOL_TYPE: "function",
        GA.GEN_AI_CONVERSATION_ID: conversation_id,
    }
    if capture_content():
        attrs[GA.GEN_AI_TOOL_CALL_ARGUMENTS] = _content(arguments)
    return _recorded_span(f"execute_tool {tool_name}", SpanKind.INTERNAL, parent, attributes=attrs)


def record_tool_result(span: Span, result: Any = None, *, is_error: bool = False) -> None:
    """Mark a tool span failed when the tool answered is_error; record the result
    (redacted) when content capture is on."""
    if not span.is_recording():
        return
    if is_error:
        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR, "tool returned is_error"))
    if result is not None and capture_content():
        span.set_attribute(GA.GEN_AI_TOOL_CALL_RESULT, _content(result))


def add_span_event(name: str, span: Span | None = None, **attrs: Any) -> None:
    """Add an event (e.g. ``loop.detected``, ``model.fallback``, ``budget.warning``,
    ``compaction``) to `span` or the current span; values are redacted. Costs nothing
    when the span is not recording."""
    span = span or trace.get_current_span()
    if span.is_recording():
        span.add_event(name, clean_attributes(attrs))


# ==========================================================================================
# attribute hygiene
# ==========================================================================================
def clean_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Drop Nones, make values OTel-typed, redact strings."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, str):
            out[key] = redact_text(value)
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = [redact_text(v) for v in value]
        elif isinstance(value, list | tuple) and all(isinstance(v, bool | int | float) for v in value):
            out[key] = list(value)
        else:
            out[key] = _content(value)
    return out


def _content(value: Any) -> str | None:
    """Redacted, JSON-encoded (unless already a str) and truncated."""
    if value is None:
        return None
    value = redact(value)
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    if len(text) > MAX_CONTENT_CHARS:
        text = text[:MAX_CONTENT_CHARS] + "…[truncated]"
    return text


def _record_error(span: Span, exc: BaseException) -> None:
    if not span.is_recording():
        return
    message = redact_text(str(exc))[:2048]
    exc_type = type(exc)
    span.set_attribute("error.type", exc_type.__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{exc_type.__name__}: {message}"))
    span.add_event("exception", {
        "exception.type": f"{exc_type.__module__}.{exc_type.__qualname__}",
        "exception.message": message,
        "exception.stacktrace": redact_text("".join(traceback.format_exception(exc)))[-8192:],
    })
