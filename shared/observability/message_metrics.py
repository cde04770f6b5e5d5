"""FastStream's NATS Prometheus middleware (message-level metrics: received, processed,
duration, sizes, in-flight, publishes), under loopwire's `loopwire_` prefix and without
session ids in its labels.

FastStream labels a consumed message with its subject; ingress and egress subjects carry
the session id (`loopwire.in.<sid>.start`), and a label per session would grow without
bound. The provider here reports the subject with the session id replaced by `*`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faststream.nats.prometheus.provider import NatsMetricsSettingsProvider, settings_provider_factory
from faststream.prometheus.manager import MetricsManager
from faststream.prometheus.middleware import PrometheusMiddleware
from nats.aio.msg import Msg

from loopwire.shared.observability import metrics

_SESSION_MARKERS = ("in", "out", "ctl")


def subject_pattern(subject: str) -> str:
    """`p.in.<sid>.start` -> `p.in.*.start` (also for `out` and `ctl`); others unchanged."""
    parts = subject.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in _SESSION_MARKERS and i + 1 < len(parts):
            return ".".join([*parts[: i + 1], "*", *parts[i + 2:]])
    return subject


class _SessionlessProvider(NatsMetricsSettingsProvider):
    __slots__ = ()

    def get_consume_attrs_from_message(self, msg: Any) -> Any:
        attrs = super().get_consume_attrs_from_message(msg)
        attrs["destination_name"] = subject_pattern(attrs["destination_name"])
        return attrs

    def get_publish_destination_name_from_cmd(self, cmd: Any) -> str:
        return subject_pattern(super().get_publish_destination_name_from_cmd(cmd))


_SESSIONLESS = _SessionlessProvider()
"""Stateless: one for every message (FastStream asks the factory once per message)."""


def _provider(msg: Msg | Sequence[Msg] | None) -> Any:
    if isinstance(msg, Msg) or msg is None:
        return _SESSIONLESS
    return settings_provider_factory(msg)


class _CachedLabels:
    """A metric whose `labels(...)` children are kept (metrics.child): FastStream's manager
    asks for six of them per message, and prometheus-client's lookup costs more than the
    rest of the middleware. The label sets are few (handlers × statuses × exception types)."""

    __slots__ = ("_metric",)

    def __init__(self, metric: Any) -> None:
        self._metric = metric

    def labels(self, **labels: Any) -> Any:
        return metrics.child(self._metric, **labels)


class _CachedContainer:
    """FastStream's MetricsContainer with every metric behind `_CachedLabels`."""

    def __init__(self, container: Any) -> None:
        self._container = container
        self._cached: dict[str, _CachedLabels] = {}

    def __getattr__(self, name: str) -> _CachedLabels:
        cached = self._cached.get(name)
        if cached is None:
            cached = self._cached[name] = _CachedLabels(getattr(self._container, name))
        return cached


def message_metrics_middleware() -> PrometheusMiddleware[Any, Any]:
    middleware: PrometheusMiddleware[Any, Any] = PrometheusMiddleware(
        settings_provider_factory=_provider, registry=metrics.REGISTRY, app_name="loopwire",
        metrics_prefix="loopwire_faststream")
    # The same manager over a container whose label children are cached (FastStream 0.6's
    # middleware keeps both as attributes; tests/integration/shared/observability/test_message_metrics.py checks the output).
    middleware._metrics_manager = MetricsManager(  # type: ignore[attr-defined]
        _CachedContainer(middleware._metrics_container), app_name="loopwire")  # type: ignore[attr-defined,arg-type]
    return middleware
