"""The run's root span, `invoke_agent {profile}`, recorded when the run ends."""

from __future__ import annotations

import random
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as GA
from opentelemetry.trace import SpanKind, Status, StatusCode

from .run_ids import preset_ids
from .setup import get_tracer
from .spans import PROVIDER_ANTHROPIC, clean_attributes


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
    token = preset_ids.set(ids)
    try:
        span = get_tracer().start_span(
            f"invoke_agent {profile}", context=Context(), kind=SpanKind.INTERNAL, start_time=start_ns or None,
            attributes=clean_attributes({
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
        preset_ids.reset(token)
    if status not in ("completed",):
        span.set_status(Status(StatusCode.ERROR, status) if status == "failed" else Status(StatusCode.UNSET))
    span.end(end_time=end_ns)
