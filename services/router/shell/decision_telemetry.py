"""What the router tells Prometheus and the tracer: counters and the run spans derived
from a committed decision.

The core stays pure; the shell calls `count_decision` once per applied (committed)
decision, never for a replayed outbox, so a redelivered input is not counted twice.
Run-level counters come from the decision's events (`run.started`, `run.ended`,
`loop.detected`, `budget.warning`, `error`, `model.fallback`); what no event shows by
itself (tokens and cost per turn and of memory's own calls, vacuous retries, commitment nudges, steers) comes from
the decision's `counts`.
"""

from __future__ import annotations

from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.observability import metrics
from loopwire.shared.observability.tracing import record_run_span

from ..core.decide import Decision
from ..core.effects import EmitEvent


def count_decision(decision: Decision, profile: str | None) -> None:
    """`profile`: the profile of the run the input found (for `run.ended`)."""
    if decision.replay:
        return
    for effect in decision.effects:
        if isinstance(effect, EmitEvent):
            _count_event(effect, profile)
    for count in decision.counts:
        if count.name in ("turn", "extra_usage"):
            model = count.labels.get("model", "")
            if count.name == "turn":
                metrics.child(metrics.TURNS, profile=count.labels.get("profile", "unknown")).inc()
            metrics.observe_usage(model, int(count.values.get("input_tokens", 0)),
                                  int(count.values.get("output_tokens", 0)), cost_usd=count.values.get("cost_usd", 0.0),
                                  cache_read=int(count.values.get("cache_read", 0)),
                                  cache_write=int(count.values.get("cache_write", 0)))
        elif count.name == "vacuous_retry":
            metrics.VACUOUS_RETRIES.inc()
        elif count.name == "commitment_nudge":
            metrics.COMMITMENT_NUDGES.inc()
        elif count.name == "steer":
            metrics.STEERS.inc()


def count_approvals(before: SessionState, decision: Decision) -> None:
    """loopwire_approvals_pending: +1 when a session starts waiting for a decision, -1
    when it stops (approved, denied, withdrawn by a steer, aborted). A checkpoint opened
    on one replica and closed on another leaves +1 and -1 on the two: their sum is right."""
    if decision.replay or decision.state is None:
        return
    was, now = before.status == "awaiting_approval", decision.state.status == "awaiting_approval"
    if now and not was:
        metrics.APPROVALS_PENDING.inc()
    elif was and not now:
        metrics.APPROVALS_PENDING.dec()


def record_ended_runs(before: SessionState, decision: Decision) -> None:
    """The root `invoke_agent` span of each run this decision ended (see
    tracing.record_run_span: its ids were drawn when the run started)."""
    run = before.run
    if run is None or not run.trace:
        return
    for effect in decision.effects:
        if isinstance(effect, EmitEvent) and effect.kind == "run.ended" and effect.run_id == run.run_id:
            # A `run.ended`'s fields (EmitEvent does not tie its fields' type to its kind).
            status, usage = effect.fields.get("status"), effect.fields.get("usage")
            tokens = usage if isinstance(usage, dict) else {}
            record_run_span(run.trace, profile=run.config.profile, session_id=before.session_id,
                            run_id=run.run_id, start_ns=run.started_ns, status=status if isinstance(status, str) else "",
                            input_tokens=tokens.get("input_tokens", 0), output_tokens=tokens.get("output_tokens", 0))


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count_event(event: EmitEvent, profile: str | None) -> None:
    f = event.fields
    if event.kind == "run.started":
        metrics.RUNS_STARTED.labels(profile=f.get("profile", "unknown")).inc()
    elif event.kind == "run.ended":
        status = f.get("status", "unknown")
        metrics.RUNS_ENDED.labels(profile=profile or "unknown", status=status).inc()
        if status == "aborted":
            metrics.ABORTS.inc()
        elif status == "budget_exhausted":
            metrics.BUDGET_EXHAUSTIONS.inc()
    elif event.kind == "budget.warning":
        metrics.BUDGET_WARNINGS.inc()
    elif event.kind == "loop.detected":
        metrics.LOOP_DETECTIONS.labels(detection=f.get("detection", "unknown"),
                                       escalation=f.get("escalation", "unknown")).inc()
    elif event.kind == "error":
        metrics.ERRORS.labels(code=f.get("code", "unknown")).inc()
    elif event.kind == "model.fallback":
        metrics.MODEL_FALLBACKS.labels(from_model=metrics.model_label(_str(f.get("from_model"))),
                                       to_model=metrics.model_label(_str(f.get("to_model"))),
                                       reason=str(f.get("reason", "unknown")).split(":", 1)[0]).inc()
