"""Every loopwire Prometheus metric, defined once, on the process's default registry.

Usage (a handler counts what it did, in one line)::

    from loopwire.shared.observability import metrics

    metrics.RUNS_STARTED.labels(profile="agentic").inc()
    metrics.observe_usage("claude-sonnet-4-5", input_tokens=1200, output_tokens=300, cost_usd=0.0081)
    metrics.observe_tool_call("add", "ok", duration_s=0.012)
    metrics.set_breaker_state("claude-sonnet-4-5", "open")
    metrics.note_delivery("router_work", msg.raw_message.metadata.num_delivered)
    with metrics.LLM_REQUEST_DURATION.labels(model=metrics.model_label(m)).time(): ...

    body = metrics.metrics_text()        # what /metrics serves (see http_server.py)

Conventions (Prometheus' naming practice): one ``loopwire_`` prefix, base units (seconds, USD), counters
end in ``_total`` (prometheus-client appends it to the names below), and no session, run
or user ids as labels. Label values that come from user input (model ids) go through
:func:`model_label`, which caps how many distinct values one process will ever export, so a
client sending random model names cannot blow up the series count. Tool names are bounded
by the tools the tools service knows; :func:`tool_label` caps them too, for safety.

Everything lives on ``REGISTRY`` (prometheus-client's default registry), so FastStream's
``NatsPrometheusMiddleware(registry=metrics.REGISTRY)`` and the process/GC collectors land
in the same exposition. `loopwire up` runs all five services in one process and serves one
``/metrics``; the ``service`` label of ``loopwire_steps_total`` tells them apart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import CollectorRegistry

from loopwire.shared.runtime.hooks import HOOKS

__all__ = ["ABORTS", "ALL_METRICS", "APPROVALS_PENDING", "BUDGET_EXHAUSTIONS", "BUDGET_WARNINGS",
           "COMMITMENT_NUDGES", "COMPACTIONS", "CONTENT_TYPE", "DEAD_LETTERS", "ERRORS", "INGRESS_IN_BACKLOG",
           "LLM_REQUEST_DURATION", "LLM_TTFT", "LOOP_DETECTIONS", "MODEL_ADMITTED", "MODEL_FALLBACKS",
           "MODEL_IN_FLIGHT", "MODEL_RATE_LIMITED", "MODEL_THROTTLED", "MODEL_WAIT_SECONDS", "REGISTRY",
           "RUNS_ENDED", "RUNS_STARTED", "STEERS", "STEPS", "TENANT_ALLOWANCE", "TENANT_COST_USD", "TENANT_QUEUED",
           "TENANT_RUNNING", "TENANT_TOKENS", "TENANT_USAGE_TODAY", "TOOL_CONFLICTS", "TURNS", "VACUOUS_RETRIES",
           "WORK_CHAINS", "child", "configure_tenant_labels", "log", "metrics_text", "model_label", "note_delivery",
           "observe_tool_call", "observe_usage", "run_consumer_sampler", "sample_consumers", "set_breaker_state",
           "tenant_label"]

log = logging.getLogger("loopwire.metrics")

# `_created` samples double the series of every counter and histogram and Prometheus does
# not use them from the text format; turn them off before any metric is defined.
prometheus_client.disable_created_metrics()

REGISTRY: CollectorRegistry = prometheus_client.REGISTRY
"""The registry every loopwire metric is on (prometheus-client's default)."""

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Content-Type of :func:`metrics_text`: text format 0.0.4, which every Prometheus reads
(prometheus-client's own default answer when a scraper sends no Accept header)."""

# -- buckets (seconds) ---------------------------------------------------------------------
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60)
LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

# -- runs and turns ------------------------------------------------------------------------
RUNS_STARTED = Counter("loopwire_runs_started", "Runs started.", ["profile"])
RUNS_ENDED = Counter(
    "loopwire_runs_ended",
    "Runs ended, by run.ended status (completed, aborted, budget_exhausted, max_turns, "
    "loop_terminated, failed).",
    ["profile", "status"],
)
TURNS = Counter("loopwire_turns", "Model turns taken (one generation each).", ["profile"])
STEERS = Counter("loopwire_steers", "Steer messages applied to a running run.")
ABORTS = Counter("loopwire_aborts", "Runs aborted by an abort request.")
COMPACTIONS = Counter("loopwire_compactions", "Context compactions performed.")
APPROVALS_PENDING = Gauge(
    "loopwire_approvals_pending",
    "Approval checkpoints waiting for a decision (set by the router from its state).",
)

# -- tokens, cost, budget ------------------------------------------------------------------
TOKENS = Counter(
    "loopwire_tokens",
    "Model tokens, direction input (incl. cache read and creation) or output.",
    ["direction", "model"],
)
COST_USD = Counter("loopwire_cost_usd", "Estimated model cost in US dollars.", ["model"])
CACHE_TOKENS = Counter(
    "loopwire_cache_tokens",
    "Input tokens read from (kind read) or written to (kind write) the prompt cache; part of loopwire_tokens.",
    ["kind", "model"],
)
BUDGET_WARNINGS = Counter("loopwire_budget_warnings", "Runs that crossed their budget warning threshold.")
BUDGET_EXHAUSTIONS = Counter("loopwire_budget_exhaustions", "Runs stopped because their budget ran out.")

# -- loop control --------------------------------------------------------------------------
LOOP_DETECTIONS = Counter(
    "loopwire_loop_detections",
    "Loop detections, by detector and escalation (redirect, switch_model, terminate).",
    ["detection", "escalation"],
)
VACUOUS_RETRIES = Counter("loopwire_vacuous_retries", "Turns retried because the model answered nothing useful.")
COMMITMENT_NUDGES = Counter(
    "loopwire_commitment_nudges", "Nudges sent because the model promised work and stopped."
)

# -- models --------------------------------------------------------------------------------
MODEL_FALLBACKS = Counter(
    "loopwire_model_fallbacks",
    "Switches from one model to another, by reason.",
    ["from_model", "to_model", "reason"],
)
CIRCUIT_BREAKER_STATE = Gauge(
    "loopwire_circuit_breaker_state",
    "Circuit breaker per model: 0 closed, 1 half-open, 2 open.",
    ["model"],
)
LLM_TTFT = Histogram(
    "loopwire_llm_time_to_first_token_seconds",
    "Time from sending a model request to its first streamed token.",
    ["model"],
    buckets=TTFT_BUCKETS,
)
LLM_REQUEST_DURATION = Histogram(
    "loopwire_llm_request_duration_seconds",
    "Duration of one model request, to its last token.",
    ["model"],
    buckets=LLM_BUCKETS,
)

# -- tools ---------------------------------------------------------------------------------
TOOL_CALLS = Counter(
    "loopwire_tool_calls",
    "Tool calls, by outcome (ok, error, timeout, denied, cancelled, unknown_tool, invalid_input).",
    ["tool", "outcome"],
)
TOOL_CALL_DURATION = Histogram(
    "loopwire_tool_call_duration_seconds",
    "Duration of one tool call.",
    ["tool"],
    buckets=TOOL_BUCKETS,
)
TOOL_CONFLICTS = Gauge(
    "loopwire_tool_conflicts",
    "Tool names that providers with different service names offer and no LOOPWIRE_TOOL_PROVIDERS "
    "pin settles: refused (served by none) until the operator pins one.",
)

# -- the bus -------------------------------------------------------------------------------
JETSTREAM_CONSUMER_PENDING = Gauge(
    "loopwire_jetstream_consumer_pending",
    "Messages in the stream not yet delivered to a consumer (JetStream num_pending).",
    ["consumer"],
)
JETSTREAM_CONSUMER_ACK_PENDING = Gauge(
    "loopwire_jetstream_consumer_ack_pending",
    "Messages delivered to a consumer and not yet acked (JetStream num_ack_pending).",
    ["consumer"],
)
JETSTREAM_REDELIVERIES = Counter(
    "loopwire_jetstream_redeliveries",
    "Messages received again after an earlier delivery was not acked in time.",
    ["consumer"],
)
STEPS = Counter(
    "loopwire_steps",
    "Work steps handled, by service and outcome (ok, replayed, error).",
    ["service", "outcome"],
)
ERRORS = Counter("loopwire_errors", "Errors reported (error events and failed steps), by code.", ["code"])
WORK_HOPS = Counter(
    "loopwire_work_hops",
    "Work the router sent on (memory.assemble, tools.execute), by how: chain (a task in this "
    "process) or jetstream (a message).",
    ["target", "via"],
)
HANDOVERS = Counter(
    "loopwire_handovers",
    "Work handed to another service by the service that produced it (a step result to the "
    "router, a generation to the llm), by how: process (a call in this process), direct (a "
    "request to the router replica that sent the step, shared/runtime/direct_results.py) or "
    "jetstream (a message).",
    ["to", "via"],
)
DEAD_LETTERS = Counter(
    "loopwire_dead_letters",
    "Work given up, whose run was ended failed (error code undeliverable), by target (the work "
    "subject, or ingress) and cause: max_deliveries (an outage longer than the tolerance, or "
    "processes that kept dying), fault (a handler that kept failing), malformed, stalled (the "
    "watchdog: no progress for longer than the tolerance).",
    ["target", "cause"],
)
INGRESS_IN_BACKLOG = Counter(
    "loopwire_ingress_backlog_applied",
    "Ingress messages a router applied before the one delivered to it, because they came "
    "earlier in the stream and were not applied yet (per-session order across replicas).",
)
# -- tenant limits (the router; fleet-wide values: every router reports the same, aggregate
# gauges with max(), counters with sum()) ---------------------------------------------------
TENANT_RUNNING = Gauge("loopwire_tenant_running", "Runs of the tenant holding a slot, across every router.",
                       ["tenant"])
TENANT_QUEUED = Gauge("loopwire_tenant_queued", "Starts of the tenant waiting for a slot, across every router.",
                      ["tenant"])
TENANT_TOKENS = Counter("loopwire_tenant_tokens", "Tokens counted against the tenant's daily allowance.",
                        ["tenant"])
TENANT_COST_USD = Counter("loopwire_tenant_cost_usd",
                          "Cost in US dollars counted against the tenant's daily allowance (priced models).",
                          ["tenant"])
TENANT_USAGE_TODAY = Gauge("loopwire_tenant_usage_today",
                           "The tenant's usage of the current UTC day, by allowance (tokens, usd).",
                           ["tenant", "allowance"])
TENANT_ALLOWANCE = Gauge("loopwire_tenant_allowance_per_day",
                         "The tenant's daily allowance (LOOPWIRE_TENANT_LIMITS), by allowance (tokens, usd).",
                         ["tenant", "allowance"])
MODEL_ADMITTED = Counter("loopwire_model_admitted",
                         "Requests the model limits (LOOPWIRE_MODEL_LIMITS) let through, by limit key.", ["key"])
MODEL_THROTTLED = Counter("loopwire_model_throttled",
                          "Generations that waited for the model limits, by limit key and reason.", ["key", "reason"])
MODEL_WAIT_SECONDS = Histogram(
    "loopwire_model_wait_seconds", "How long a request waited for the model limits before it was sent.", ["key"],
    buckets=(0.0, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0))
MODEL_RATE_LIMITED = Counter("loopwire_model_rate_limited",
                             "429 and 529 answers from the provider, by limit key (they pause every replica).",
                             ["key", "status"])
MODEL_IN_FLIGHT = Gauge("loopwire_model_in_flight",
                        "Requests this replica has in flight under the model limits, by limit key.", ["key"])
WORK_CHAINS = Gauge("loopwire_work_chains", "Work chains this process holds now (runs kept in this process).")
# counted by the runtime's chain balance through its hooks (runtime/hooks.py)
HOOKS.chain_opened = WORK_CHAINS.inc
HOOKS.chain_closed = WORK_CHAINS.dec
ROUTER_WORK = frozenset({"memory.assemble", "tools.execute"})
"""The routes of the work the router sends on (WORK_HOPS); the others are hand-overs."""


def _dispatched(label: str, to: str, via: str) -> None:
    if label in ROUTER_WORK:
        child(WORK_HOPS, target=label, via=via).inc()
    else:
        child(HANDOVERS, to=to, via=via).inc()


HOOKS.dispatched = _dispatched

ALL_METRICS: tuple[Any, ...] = (
    RUNS_STARTED, RUNS_ENDED, TURNS, STEERS, ABORTS, COMPACTIONS, APPROVALS_PENDING,
    TOKENS, COST_USD, CACHE_TOKENS, BUDGET_WARNINGS, BUDGET_EXHAUSTIONS,
    LOOP_DETECTIONS, VACUOUS_RETRIES, COMMITMENT_NUDGES,
    MODEL_FALLBACKS, CIRCUIT_BREAKER_STATE, LLM_TTFT, LLM_REQUEST_DURATION,
    TOOL_CALLS, TOOL_CALL_DURATION, TOOL_CONFLICTS,
    JETSTREAM_CONSUMER_PENDING, JETSTREAM_CONSUMER_ACK_PENDING, JETSTREAM_REDELIVERIES,
    STEPS, ERRORS, WORK_HOPS, HANDOVERS, INGRESS_IN_BACKLOG, WORK_CHAINS, DEAD_LETTERS,
    TENANT_RUNNING, TENANT_QUEUED, TENANT_TOKENS, TENANT_COST_USD, TENANT_USAGE_TODAY, TENANT_ALLOWANCE,
    MODEL_ADMITTED, MODEL_THROTTLED, MODEL_WAIT_SECONDS, MODEL_RATE_LIMITED, MODEL_IN_FLIGHT,
)
"""Every metric above, for tests and docs."""

BREAKER_STATES = {"closed": 0, "half_open": 1, "half-open": 1, "open": 2}


# -- bounded label values ------------------------------------------------------------------
class _BoundedLabels:
    """Admits at most `limit` distinct values per family; later newcomers become "other"."""

    def __init__(self, limit: int, max_len: int = 80) -> None:
        self.limit = limit
        self.max_len = max_len
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, family: str, value: str | None) -> str:
        if not value:
            return "unknown"
        value = value[: self.max_len]
        seen = self._seen.setdefault(family, set())
        if value in seen:
            return value
        with self._lock:
            if len(seen) >= self.limit:
                return "other"
            seen.add(value)
        return value


_bounded = _BoundedLabels(limit=64)


def model_label(model: str | None) -> str:
    """A model id as a label value: at most 64 distinct ones per process, then "other"."""
    return _bounded("model", model)


def tool_label(tool: str | None) -> str:
    """A tool name as a label value: at most 64 distinct ones per process, then "other"."""
    return _bounded("tool", tool)


_tenants = _BoundedLabels(limit=20)


def configure_tenant_labels(limit: int, named: list[str]) -> None:
    """LOOPWIRE_TENANT_METRICS_LABELS: at most `limit` distinct tenant label values in this
    process, the tenants the operator named (`named`, in order) first."""
    _tenants.limit = max(0, limit)
    for tenant in named:
        _tenants("tenant", tenant)


def tenant_label(tenant: str) -> str:
    """A tenant as a label value: the first LOOPWIRE_TENANT_METRICS_LABELS ones, then "other"."""
    return _tenants("tenant", tenant)


# -- one-line helpers ----------------------------------------------------------------------
_children: dict[tuple[int, tuple[tuple[str, str], ...]], Any] = {}


def child(metric: Any, **labels: str) -> Any:
    """`metric.labels(**labels)`, kept: prometheus-client validates and locks on every
    lookup, which costs more than the increment on a hot path. Label values here are
    bounded (model_label, tool_label, fixed sets), so the cache is too."""
    key = (id(metric), tuple(labels.items()))
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(**labels)
    return found


def observe_usage(model: str, input_tokens: int, output_tokens: int, *, cost_usd: float = 0.0,
                  cache_read: int = 0, cache_write: int = 0) -> None:
    """Count one model response's tokens and cost. `input_tokens` already includes the
    cache read and cache creation tokens (Anthropic's usage reports them apart), which
    `cache_read` and `cache_write` count again on their own."""
    m = model_label(model)
    if cache_read:
        child(CACHE_TOKENS, kind="read", model=m).inc(cache_read)
    if cache_write:
        child(CACHE_TOKENS, kind="write", model=m).inc(cache_write)
    if input_tokens:
        child(TOKENS, direction="input", model=m).inc(input_tokens)
    if output_tokens:
        child(TOKENS, direction="output", model=m).inc(output_tokens)
    if cost_usd:
        child(COST_USD, model=m).inc(cost_usd)


def observe_tool_call(tool: str, outcome: str, duration_s: float | None = None) -> None:
    """Count one tool call and, when it ran, its duration."""
    t = tool_label(tool)
    child(TOOL_CALLS, tool=t, outcome=outcome).inc()
    if duration_s is not None:
        child(TOOL_CALL_DURATION, tool=t).observe(duration_s)


def set_breaker_state(model: str, state: str | int) -> None:
    """Set the breaker gauge of `model` from "closed" / "half_open" / "open" (or 0/1/2)."""
    value = BREAKER_STATES[state] if isinstance(state, str) else int(state)
    CIRCUIT_BREAKER_STATE.labels(model=model_label(model)).set(value)


def note_delivery(consumer: str, num_delivered: int) -> None:
    """Call on every JetStream delivery; counts a redelivery when `num_delivered` > 1."""
    if num_delivered > 1:
        JETSTREAM_REDELIVERIES.labels(consumer=consumer).inc()


async def sample_consumers(js: Any, stream: str, consumers: Mapping[str, str]) -> None:
    """Set the pending gauges from JetStream consumer info, once.

    `consumers` maps the label (the short durable, e.g. ``router_work``) to the consumer's
    real durable name (which carries the subject prefix). A consumer that does not exist
    yet is skipped."""
    for label, durable in consumers.items():
        try:
            info = await js.consumer_info(stream, durable)
        except Exception as exc:  # not created yet, or NATS is away: the next sample retries
            log.debug("consumer_info %s/%s failed: %s", stream, durable, exc)
            continue
        JETSTREAM_CONSUMER_PENDING.labels(consumer=label).set(info.num_pending or 0)
        JETSTREAM_CONSUMER_ACK_PENDING.labels(consumer=label).set(info.num_ack_pending or 0)


async def run_consumer_sampler(js: Any, stream: str, consumers: Mapping[str, str],
                               *, interval_s: float = 5.0) -> None:
    """Sample consumer lag every `interval_s` until cancelled (start it as a task)."""
    while True:
        await sample_consumers(js, stream, consumers)
        await asyncio.sleep(interval_s)


def metrics_text(registry: CollectorRegistry | None = None) -> bytes:
    """The Prometheus text exposition of `registry` (default: :data:`REGISTRY`)."""
    return prometheus_client.generate_latest(registry or REGISTRY)
