"""shared/observability/metrics.py: names, labels, helpers, bounded cardinality."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopwire.shared.observability import metrics

pytestmark = pytest.mark.unit

REQUIRED = {
    "loopwire_runs_started": ("counter", {"profile"}),
    "loopwire_runs_ended": ("counter", {"profile", "status"}),
    "loopwire_turns": ("counter", {"profile"}),
    "loopwire_tokens": ("counter", {"direction", "model"}),
    "loopwire_cost_usd": ("counter", {"model"}),
    "loopwire_budget_warnings": ("counter", set()),
    "loopwire_budget_exhaustions": ("counter", set()),
    "loopwire_loop_detections": ("counter", {"detection", "escalation"}),
    "loopwire_vacuous_retries": ("counter", set()),
    "loopwire_commitment_nudges": ("counter", set()),
    "loopwire_model_fallbacks": ("counter", {"from_model", "to_model", "reason"}),
    "loopwire_circuit_breaker_state": ("gauge", {"model"}),
    "loopwire_tool_calls": ("counter", {"tool", "outcome"}),
    "loopwire_tool_call_duration_seconds": ("histogram", {"tool"}),
    "loopwire_llm_time_to_first_token_seconds": ("histogram", {"model"}),
    "loopwire_llm_request_duration_seconds": ("histogram", {"model"}),
    "loopwire_compactions": ("counter", set()),
    "loopwire_steers": ("counter", set()),
    "loopwire_aborts": ("counter", set()),
    "loopwire_approvals_pending": ("gauge", set()),
    "loopwire_jetstream_consumer_pending": ("gauge", {"consumer"}),
    "loopwire_jetstream_redeliveries": ("counter", {"consumer"}),
    "loopwire_errors": ("counter", {"code"}),
    "loopwire_steps": ("counter", {"service", "outcome"}),
}


def _families() -> dict[str, Any]:
    return {m._name: m for m in metrics.ALL_METRICS}


def test_every_required_metric_is_defined_with_its_labels() -> None:
    families = _families()
    for name, (kind, labels) in REQUIRED.items():
        assert name in families, name
        assert families[name]._type == kind, name
        assert set(families[name]._labelnames) == labels, name


def test_naming_conventions() -> None:
    for m in metrics.ALL_METRICS:
        assert m._name.startswith("loopwire_")
        assert not m._name.endswith("_total")  # prometheus-client appends it to counters
        assert not any(ms in m._name for ms in ("_ms", "_milliseconds", "_minutes"))
        forbidden = {"session_id", "run_id", "user", "user_id", "sid", "checkpoint_id", "tool_use_id"}
        assert not forbidden & set(m._labelnames), m._name
        assert m._documentation


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels or {})
    return value or 0.0


def test_observe_usage_counts_tokens_and_cost() -> None:
    before_in = _sample("loopwire_tokens_total", {"direction": "input", "model": "m-usage"})
    before_cost = _sample("loopwire_cost_usd_total", {"model": "m-usage"})
    metrics.observe_usage("m-usage", input_tokens=1200, output_tokens=300, cost_usd=0.25)
    metrics.observe_usage("m-usage", input_tokens=10, output_tokens=0)
    assert _sample("loopwire_tokens_total", {"direction": "input", "model": "m-usage"}) == before_in + 1210
    assert _sample("loopwire_tokens_total", {"direction": "output", "model": "m-usage"}) >= 300
    assert _sample("loopwire_cost_usd_total", {"model": "m-usage"}) == pytest.approx(before_cost + 0.25)


def test_tool_call_breaker_and_redelivery_helpers() -> None:
    metrics.observe_tool_call("t-helper", "ok", duration_s=0.02)
    metrics.observe_tool_call("t-helper", "denied")
    assert _sample("loopwire_tool_calls_total", {"tool": "t-helper", "outcome": "denied"}) == 1
    assert _sample("loopwire_tool_call_duration_seconds_count", {"tool": "t-helper"}) == 1
    assert _sample("loopwire_tool_call_duration_seconds_bucket", {"tool": "t-helper", "le": "0.025"}) == 1

    for state, value in (("open", 2), ("half_open", 1), ("closed", 0), (2, 2)):
        metrics.set_breaker_state("m-breaker", state)
        assert _sample("loopwire_circuit_breaker_state", {"model": "m-breaker"}) == value

    metrics.note_delivery("c-helper", 1)
    metrics.note_delivery("c-helper", 2)
    metrics.note_delivery("c-helper", 5)
    assert _sample("loopwire_jetstream_redeliveries_total", {"consumer": "c-helper"}) == 2


def test_model_label_is_bounded() -> None:
    bounded = metrics._BoundedLabels(limit=3, max_len=10)
    assert [bounded("model", f"m{i}") for i in range(5)] == ["m0", "m1", "m2", "other", "other"]
    assert bounded("model", "m1") == "m1"  # known values stay
    assert bounded("model", "x" * 50) == "other"
    assert bounded("tool", "x" * 50) == "x" * 10  # another family has its own budget
    assert bounded("model", None) == "unknown"


async def test_sample_consumers_sets_pending_gauges() -> None:
    class FakeJS:
        def __init__(self) -> None:
            self.calls = 0
            self.second_call = asyncio.Event()

        async def consumer_info(self, stream: str, durable: str) -> SimpleNamespace:
            self.calls += 1
            if self.calls == 2:
                self.second_call.set()
            if durable == "missing":
                raise RuntimeError("consumer not found")
            return SimpleNamespace(num_pending=42, num_ack_pending=7)

    await metrics.sample_consumers(FakeJS(), "LOOPWIRE_WORK", {"llm_generate": "p_llm_generate",
                                                               "gone": "missing"})
    assert _sample("loopwire_jetstream_consumer_pending", {"consumer": "llm_generate"}) == 42
    assert _sample("loopwire_jetstream_consumer_ack_pending", {"consumer": "llm_generate"}) == 7
    assert metrics.REGISTRY.get_sample_value("loopwire_jetstream_consumer_pending", {"consumer": "gone"}) is None

    js = FakeJS()
    task = asyncio.create_task(metrics.run_consumer_sampler(js, "S", {"loop": "d"}, interval_s=0.01))
    try:
        await asyncio.wait_for(js.second_call.wait(), 5)  # the first sample is complete by now
        assert _sample("loopwire_jetstream_consumer_pending", {"consumer": "loop"}) == 42
    finally:
        task.cancel()


def test_metrics_text_parses_and_has_our_families() -> None:
    metrics.RUNS_STARTED.labels(profile="agentic").inc()
    text = metrics.metrics_text().decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"loopwire_runs_started", "loopwire_tool_call_duration_seconds"} <= names
    assert "_created" not in text  # disabled: half the series for nothing
