"""The llm service's step-level counters: steps by outcome, and model switches.

A call's own span and latency histograms are instrumented_model.py's; tokens and cost are
counted by the router (it owns the run's accounting).
"""

from __future__ import annotations

from loopwire.shared.observability import metrics, tracing


def count_step(outcome: str) -> None:
    """`ok`, `error` (a failed model call, reported as a result) or `replayed`."""
    metrics.child(metrics.STEPS, service="llm", outcome=outcome).inc()


def count_fallback(switch: dict[str, str]) -> None:
    # The reason label is the error code only: messages would make unbounded series.
    code = switch.get("reason", "").split(":", 1)[0] or "unknown"
    metrics.MODEL_FALLBACKS.labels(from_model=metrics.model_label(switch.get("from_model")),
                                   to_model=metrics.model_label(switch.get("to_model")), reason=code).inc()
    tracing.add_span_event("model.fallback", None, **switch)
