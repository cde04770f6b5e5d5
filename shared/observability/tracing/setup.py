"""Trace export: the SDK TracerProvider a process installs when the environment asks for it.

Export is off unless a standard variable asks for it: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``,
``none``). Then :func:`setup_tracing` installs a TracerProvider with a batch processor and
an OTLP/HTTP exporter (gRPC when ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` and
``opentelemetry-exporter-otlp-proto-grpc`` is installed), each behind the redacting
exporter (redacting_exporter.py), with the run-aware id generator (run_ids.py); the
services' brokers get FastStream's ``NatsTelemetryMiddleware`` (:func:`broker_middlewares`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from opentelemetry import trace

from loopwire.shared.contract.redaction import register_env_secrets

from .redacting_exporter import RedactingSpanExporter
from .run_ids import RunIdGenerator

log = logging.getLogger("loopwire.telemetry")

_EXPORT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")

_lock = threading.Lock()
_installed_provider: Any = None
_provider_override: Any = None
_tracer: trace.Tracer | None = None
_consume_tracer: trace.Tracer | None = None


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


def exporting_tracer() -> trace.Tracer | None:
    """The installed provider's tracer when this process exports traces, else None: the
    work consumers' spans per message (consume_scope.py) are made only then, as
    FastStream's telemetry middleware is added only then (`broker_middlewares`)."""
    global _consume_tracer
    if _installed_provider is None:
        return None
    if _consume_tracer is None:
        _consume_tracer = _installed_provider.get_tracer("loopwire.consume")
    return _consume_tracer


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


def recording() -> bool:
    """Whether any spans can be recorded: a provider is set (loopwire's, a test's, the
    embedding application's), not the API's default."""
    return _provider_override is not None or not isinstance(trace.get_tracer_provider(),
                                                            trace.ProxyTracerProvider)
