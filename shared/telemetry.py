"""Tracing for loopwire: OpenTelemetry spans after the GenAI semantic conventions.

Usage::

    from loopwire.shared import telemetry

    telemetry.setup_tracing("loopwire-llm")          # once per process; no-op unless OTEL_* set

    # the llm service, around one model call (parent = the envelope's `trace` field):
    with telemetry.chat_span(model, parent=env.trace, conversation_id=env.session_id,
                             max_tokens=4096, system=system, messages=messages) as span:
        response = await provider.generate(...)
        telemetry.record_chat_response(span, response_model=response.model, response_id=response.id,
                                       finish_reasons=[response.stop_reason], input_tokens=u.input_tokens,
                                       output_tokens=u.output_tokens, cache_read_input_tokens=...)

    with telemetry.execute_tool_span("add", call.id, parent=env.trace, arguments=call.input) as span:
        result = await call_tool(...)
        telemetry.record_tool_result(span, result.content, is_error=result.is_error)

    telemetry.add_span_event("loop.detected", detection="repeat", escalation="redirect")
    next_envelope.trace = telemetry.inject_context()   # W3C traceparent/tracestate of the current span

Spans: ``invoke_agent {profile}`` (INTERNAL), ``chat {model}`` (CLIENT), ``execute_tool
{tool}`` (INTERNAL), with the gen_ai.* attributes of OpenTelemetry's GenAI semantic
conventions. Events (loop detections,
fallbacks, budget warnings, compactions) go on the current span with :func:`add_span_event`.

Export is off unless a standard variable asks for it: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``,
``none``). Then :func:`setup_tracing` installs an SDK TracerProvider with a batch processor
and an OTLP/HTTP exporter (``opentelemetry-exporter-otlp-proto-http``, a dependency of
loopwire; gRPC when ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` and
``opentelemetry-exporter-otlp-proto-grpc`` is installed), and the services' brokers get
FastStream's ``NatsTelemetryMiddleware``, so every JetStream hop is a messaging span in
the run's trace (:func:`broker_middlewares`). Without them nothing is installed: the helpers hand out non-recording spans that still carry an
incoming traceparent along, so trace ids stay continuous (and in the logs) at near-zero cost.

Privacy: message contents (prompts, completions, tool arguments and results) are recorded
only when ``LOOPWIRE_OTEL_CAPTURE_CONTENT=true``. Everything recorded — attributes, event
attributes, exception messages — goes through :func:`redact`, which masks API keys and
secrets; the exporter installed by :func:`setup_tracing` redacts every span once more before
it leaves the process, whoever set the attribute.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event as _Event
from opentelemetry.sdk.trace import ReadableSpan as _ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .lru import LruCache

log = logging.getLogger("loopwire.telemetry")

PROVIDER_ANTHROPIC = GA.GenAiProviderNameValues.ANTHROPIC.value
MAX_CONTENT_CHARS = 16 * 1024
"""Recorded content longer than this is truncated (a span is not a transcript)."""

_EXPORT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
_SECRET_ENV_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "LOOPWIRE_NATS_PASSWORD",
                    "LOOPWIRE_NATS_TOKEN", "LOOPWIRE_REDIS_PASSWORD")

_lock = threading.Lock()
_installed_provider: Any = None
_provider_override: Any = None
_tracer: trace.Tracer | None = None


# ==========================================================================================
# redaction
# ==========================================================================================
_KEY_VALUE = (
    r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret"
    r"|secret|password|passwd|pwd|token)"
    r"([\"']?\s*[:=]\s*[\"']?)"
    r"([^\s\"',;&}]+)"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}"), "sk-ant-***"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "sk-***"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "gh_***"),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}"), "xox-***"),
    (re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=*\-]+"), "Bearer ***"),
    (re.compile(r"(?i)\bBasic\s+[A-Za-z0-9+/=]{8,}"), "Basic ***"),
    (re.compile(_KEY_VALUE), r"\1\2***"),
    # credentials in URLs: scheme://user:password@host
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)[^@\s/]+@"), r"\1***@"),
)
_SECRET_KEY = re.compile(
    r"(?i)^(?:x-)?(?:api[_-]?key|authorization|proxy-authorization|credentials?|"
    r"(?:access|auth|refresh|id|bearer)?[_-]?token|.*secret.*|.*password.*|passwd|pwd)$"
)
_literal_secrets: set[str] = set()


def register_secret(value: str | None, min_length: int = 8) -> None:
    """Mask this exact string wherever it appears (e.g. a configured password). Values
    shorter than `min_length` are left alone: masking every "abc" would garble the logs
    (configured credentials use 4, shared/credentials.py)."""
    if value and len(value) >= max(min_length, 4):
        _literal_secrets.add(value)


def register_env_secrets() -> None:
    """Register the values of the well-known secret variables (ANTHROPIC_API_KEY, ...)."""
    for name in _SECRET_ENV_VARS:
        register_secret(os.environ.get(name))


def redact(value: Any) -> Any:
    """Mask API keys and secrets in `value` (a string, or dicts/lists of them).

    Catches ``sk-ant-...`` and other provider keys, ``Bearer``/``Basic`` credentials,
    ``api_key=...`` / ``"password": "..."`` pairs, ``user:pass@`` in URLs, registered
    literal secrets, and any string under a key named like a secret. Other types pass
    through unchanged; bytes come back as a redacted str."""
    if isinstance(value, str):
        return _redact_str(value)
    if isinstance(value, bytes | bytearray):
        return _redact_str(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {k: ("***" if isinstance(v, str) and isinstance(k, str) and _SECRET_KEY.match(k) else redact(v))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


def _redact_str(text: str) -> str:
    for secret in _literal_secrets:
        if secret in text:
            text = text.replace(secret, "***")
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


_capture_content = False


def set_capture_content(on: bool) -> None:
    """Allow (or forbid) recording message contents; the launcher sets it from
    ``LOOPWIRE_OTEL_CAPTURE_CONTENT`` (Settings.otel_capture_content). Off until then, so
    an application embedding loopwire records no contents unless it asks."""
    global _capture_content
    _capture_content = on


def capture_content() -> bool:
    """Whether message contents may be recorded."""
    return _capture_content


# ==========================================================================================
# setup
# ==========================================================================================
def export_requested() -> bool:
    """True when a standard OTEL_* variable asks for trace export."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name, "").strip() for name in _EXPORT_VARS)


def setup_tracing(service_name: str) -> bool:
    """Install an SDK TracerProvider exporting spans, if the environment asks for it.

    Returns True when a provider is installed (by this call or an earlier one: the first
    call wins, so `loopwire up` can call it once per service). ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` take precedence over `service_name`; ``OTEL_TRACES_SAMPLER``
    is honoured by the SDK."""
    global _installed_provider
    register_env_secrets()
    with _lock:
        if _installed_provider is not None:
            return True
        if not export_requested():
            return False
        names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
        exporters = [e for e in (_make_exporter(n) for n in (names or ["otlp"])) if e is not None]
        if not exporters:
            return False

        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attrs = {"service.namespace": "loopwire"}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = service_name
        provider = TracerProvider(resource=Resource.create(attrs), id_generator=RunIdGenerator())
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(RedactingSpanExporter(exporter)))
        trace.set_tracer_provider(provider)
        _installed_provider = provider
        log.info("tracing on: %s", ", ".join(type(e).__name__ for e in exporters))
        return True


def _make_exporter(name: str) -> Any:
    if name == "none":
        return None
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported here (otlp, console, none)", name)
        return None
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        log.warning("trace export requested but %s is not installed (pip install %s); "
                    "tracing stays off", package, package)
        return None
    return OTLPSpanExporter()


def broker_middlewares() -> list[Any]:
    """FastStream's NATS telemetry middleware when this process exports traces (a consumer
    span per message received, parented by its `traceparent` header), else nothing: with
    no exporter it would only cost CPU on every message."""
    if _installed_provider is None:
        return []
    from faststream.nats.opentelemetry import NatsTelemetryMiddleware

    return [NatsTelemetryMiddleware(tracer_provider=_installed_provider, include_messages_counters=False)]


def shutdown_tracing() -> None:
    """Flush and stop the installed provider (also done at interpreter exit)."""
    global _installed_provider
    with _lock:
        if _installed_provider is not None:
            _installed_provider.shutdown()


def set_tracer_provider(provider: Any) -> None:
    """Use `provider` for loopwire's spans instead of the global one (tests, embedding);
    None goes back to the global provider."""
    global _provider_override, _tracer
    _provider_override = provider
    _tracer = None


def get_tracer() -> trace.Tracer:
    global _tracer
    if _tracer is None:
        source = _provider_override if _provider_override is not None else trace
        _tracer = source.get_tracer("loopwire")
    return _tracer


# ==========================================================================================
# context propagation
# ==========================================================================================
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


def _recording() -> bool:
    """Whether any spans can be recorded: a provider is set (loopwire's, a test's, the
    embedding application's), not the API's default."""
    return _provider_override is not None or not isinstance(trace.get_tracer_provider(),
                                                            trace.ProxyTracerProvider)


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside any trace."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def _parent_context(parent: Context | Mapping[str, str] | None) -> Context | None:
    if parent is None or isinstance(parent, Context):
        return parent
    if not parent:  # an empty carrier: the sender had no trace, stay in ours
        return None
    return extract_context(parent)


# ==========================================================================================
# spans
# ==========================================================================================
@contextmanager
def _span(name: str, kind: SpanKind, parent: Context | Mapping[str, str] | None,
          attributes: dict[str, Any]) -> Iterator[Span]:
    if not _recording():
        # What the API's no-op tracer does (the parent's span, non-recording, made current,
        # so log lines and `inject_context` keep the run's trace), without its machinery.
        span = trace.get_current_span(_parent_context(parent))
        if not isinstance(span, trace.NonRecordingSpan):
            span = trace.NonRecordingSpan(span.get_span_context())
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        finally:
            otel_context.detach(token)
        return
    with get_tracer().start_as_current_span(
        name, context=_parent_context(parent), kind=kind,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        if span.is_recording():
            span.set_attributes(_clean(attributes))
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


@contextmanager
def invoke_agent_span(profile: str, conversation_id: str, *, run_id: str | None = None,
                      provider: str = PROVIDER_ANTHROPIC,
                      parent: Context | Mapping[str, str] | None = None) -> Iterator[Span]:
    """``invoke_agent {profile}``: one agent run (or the router's handling of it)."""
    with _span(f"invoke_agent {profile}", SpanKind.INTERNAL, parent, {
        GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.INVOKE_AGENT.value,
        GA.GEN_AI_PROVIDER_NAME: provider,
        GA.GEN_AI_AGENT_NAME: profile,
        GA.GEN_AI_CONVERSATION_ID: conversation_id,
        "loopwire.run_id": run_id,
    }) as span:
        yield span


@contextmanager
def chat_span(model: str, *, conversation_id: str | None = None, max_tokens: int | None = None,
              temperature: float | None = None, system: Any = None, messages: Any = None,
              provider: str = PROVIDER_ANTHROPIC,
              parent: Context | Mapping[str, str] | None = None) -> Iterator[Span]:
    """``chat {model}`` (CLIENT): one model request. `system` and `messages` are recorded
    (redacted, truncated) only when content capture is on."""
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
    with _span(f"chat {model}", SpanKind.CLIENT, parent, attrs) as span:
        yield span


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
    span.set_attributes(_clean(attrs))


@contextmanager
def execute_tool_span(tool_name: str, tool_call_id: str, *, arguments: Any = None,
                      conversation_id: str | None = None,
                      parent: Context | Mapping[str, str] | None = None) -> Iterator[Span]:
    """``execute_tool {tool}``: one tool call. `arguments` are recorded only when content
    capture is on."""
    attrs: dict[str, Any] = {
        GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.EXECUTE_TOOL.value,
        GA.GEN_AI_TOOL_NAME: tool_name,
        GA.GEN_AI_TOOL_CALL_ID: tool_call_id,
        GA.GEN_AI_TOOL_TYPE: "function",
        GA.GEN_AI_CONVERSATION_ID: conversation_id,
    }
    if capture_content():
        attrs[GA.GEN_AI_TOOL_CALL_ARGUMENTS] = _content(arguments)
    with _span(f"execute_tool {tool_name}", SpanKind.INTERNAL, parent, attrs) as span:
        yield span


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
        span.add_event(name, _clean(attrs))


# ==========================================================================================
# attribute hygiene
# ==========================================================================================
def _clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Drop Nones, make values OTel-typed, redact strings."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, str):
            out[key] = _redact_str(value)
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = [_redact_str(v) for v in value]
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
    message = _redact_str(str(exc))[:2048]
    exc_type = type(exc)
    span.set_attribute("error.type", exc_type.__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{exc_type.__name__}: {message}"))
    span.add_event("exception", {
        "exception.type": f"{exc_type.__module__}.{exc_type.__qualname__}",
        "exception.message": message,
        "exception.stacktrace": _redact_str("".join(traceback.format_exception(exc)))[-8192:],
    })


# ==========================================================================================
# export-side redaction
# ==========================================================================================
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
            out[key] = _redact_str(value)
        elif isinstance(value, tuple | list) and value and isinstance(value[0], str):
            out[key] = tuple(_redact_str(v) for v in value)
        else:
            out[key] = value
    return out


def _redacted_copy(span: Any) -> Any:
    status = span.status
    if status.description:
        status = Status(status.status_code, _redact_str(status.description))
    return _ReadableSpan(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=_redact_attrs(span.attributes),
        events=[_Event(e.name, _redact_attrs(e.attributes), e.timestamp) for e in span.events],
        links=span.links, kind=span.kind, status=status, start_time=span.start_time,
        end_time=span.end_time, instrumentation_scope=span.instrumentation_scope,
    )


# ==========================================================================================
# the run's root span
# ==========================================================================================
# A run outlives any one handler (and may outlive a process), so its `invoke_agent` span
# cannot be held open in memory. Instead the router draws the run's trace id and root span
# id when the run starts, stores them (as a traceparent) in the session state, parents
# every step's spans on them, and records the root span itself when the run ends, with
# those very ids and the run's start time — whichever replica ends the run.
_preset_ids: ContextVar[tuple[int, int] | None] = ContextVar("loopwire_preset_ids", default=None)


class RunIdGenerator(RandomIdGenerator):
    """Random ids, except while a preset (trace id, span id) is in force."""

    def generate_trace_id(self) -> int:
        preset = _preset_ids.get()
        return preset[0] if preset else super().generate_trace_id()

    def generate_span_id(self) -> int:
        preset = _preset_ids.get()
        return preset[1] if preset else super().generate_span_id()


def new_run_trace() -> dict[str, str]:
    """A fresh traceparent for a run's root span (sampled), cheap enough to always draw."""
    trace_id = random.getrandbits(128) or 1
    span_id = random.getrandbits(64) or 1
    return {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-01"}


def _ids_of(carrier: Mapping[str, str]) -> tuple[int, int] | None:
    parts = carrier.get("traceparent", "").split("-")
    if len(parts) != 4:
        return None
    try:
        return int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None


def record_run_span(run_trace: Mapping[str, str], *, profile: str, session_id: str, run_id: str,
                    start_ns: int, status: str, input_tokens: int = 0, output_tokens: int = 0,
                    end_ns: int | None = None) -> None:
    """Record the run's `invoke_agent {profile}` span, with the ids drawn at its start."""
    ids = _ids_of(run_trace)
    if ids is None:
        return
    token = _preset_ids.set(ids)
    try:
        span = get_tracer().start_span(
            f"invoke_agent {profile}", context=Context(), kind=SpanKind.INTERNAL, start_time=start_ns or None,
            attributes=_clean({
                GA.GEN_AI_OPERATION_NAME: GA.GenAiOperationNameValues.INVOKE_AGENT.value,
                GA.GEN_AI_PROVIDER_NAME: PROVIDER_ANTHROPIC,
                GA.GEN_AI_AGENT_NAME: profile,
                GA.GEN_AI_CONVERSATION_ID: session_id,
                "loopwire.run_id": run_id,
                "loopwire.run.status": status,
                GA.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
                GA.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
            }))
    finally:
        _preset_ids.reset(token)
    if status not in ("completed",):
        span.set_status(Status(StatusCode.ERROR, status) if status == "failed" else Status(StatusCode.UNSET))
    span.end(end_time=end_ns)
