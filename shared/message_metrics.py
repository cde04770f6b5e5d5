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
from faststream.prometheus.middleware import PrometheusMiddleware
from nats.aio.msg import Msg

from . import metrics

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


def _provider(msg: Msg | Sequence[Msg] | None) -> Any:
    if isinstance(msg, Msg) or msg is None:
        return _SessionlessProvider()
    return settings_provider_factory(msg)


def message_metrics_middleware() -> PrometheusMiddleware[Any, Any]:
    return PrometheusMiddleware(settings_provider_factory=_provider, registry=metrics.REGISTRY,
                                app_name="loopwire", metrics_prefix="loopwire_faststream")
