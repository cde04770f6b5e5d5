"""Tracing for loopwire: OpenTelemetry spans after the GenAI semantic conventions.

Usage::

    from loopwire.shared.observability import tracing

    tracing.setup_tracing("loopwire-llm")          # once per process; no-op unless OTEL_* set

    # the llm service, around one model call (parent = the envelope's `trace` field):
    with tracing.chat_span(model, parent=env.trace, conversation_id=env.session_id,
                           max_tokens=4096, system=system, messages=messages) as span:
        response = await provider.generate(...)
        tracing.record_chat_response(span, response_model=response.model, response_id=response.id,
                                     finish_reasons=[response.stop_reason], input_tokens=u.input_tokens,
                                     output_tokens=u.output_tokens, cache_read_input_tokens=...)

    with tracing.execute_tool_span("add", call.id, parent=env.trace, arguments=call.input) as span:
        result = await call_tool(...)
        tracing.record_tool_result(span, result.content, is_error=result.is_error)

    tracing.add_span_event("loop.detected", detection="repeat", escalation="redirect")
    next_envelope.trace = tracing.inject_context()   # W3C traceparent/tracestate of the current span

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
it leaves the process, whoever set the attribute (`redact` lives in contract/redaction.py).

Modules: setup.py (export), propagation.py (W3C context across hops), spans.py (the GenAI
spans and their attributes), redacting_exporter.py, run_ids.py and run_span.py (the run's
root span, recorded with the ids drawn at its start).
"""

from .propagation import current_trace_id, extract_context, inject_context
from .redacting_exporter import RedactingSpanExporter
from .run_ids import RunIdGenerator
from .run_span import new_run_trace, record_run_span
from .setup import (
    broker_middlewares,
    export_requested,
    get_tracer,
    set_tracer_provider,
    setup_tracing,
    shutdown_tracing,
)
from .spans import (
    MAX_CONTENT_CHARS,
    PROVIDER_ANTHROPIC,
    add_span_event,
    capture_content,
    chat_span,
    execute_tool_span,
    invoke_agent_span,
    record_chat_response,
    record_tool_result,
    set_capture_content,
)

__all__ = [
    "MAX_CONTENT_CHARS", "PROVIDER_ANTHROPIC", "RedactingSpanExporter", "RunIdGenerator", "add_span_event",
    "broker_middlewares", "capture_content", "chat_span", "current_trace_id", "execute_tool_span",
    "export_requested", "extract_context", "get_tracer", "inject_context", "invoke_agent_span", "new_run_trace",
    "record_chat_response", "record_run_span", "record_tool_result", "set_capture_content",
    "set_tracer_provider", "setup_tracing", "shutdown_tracing",
]
