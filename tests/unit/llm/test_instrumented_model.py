"""Each attempt of a model call gets a chat span in the run's trace."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.llm.fallback import FallbackModel
from loopwire.llm.generation import model_request
from loopwire.llm.instrumented_model import InstrumentedModel
from loopwire.llm.scripted_model import (
    ScriptedModel,
)
from loopwire.shared.contract.envelopes import Generate
from loopwire.shared.observability import metrics
from tests.model_streams import Streamed
from tests.unit.llm.model_calls import overloaded

pytestmark = pytest.mark.unit


# -- observation ------------------------------------------------------------------------------
async def test_each_attempt_gets_a_chat_span_in_the_runs_trace(spans: InMemorySpanExporter) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    env = Generate(session_id="s1", run_id="r1", step_id="r1:1:g0", models=["p", "f"], max_tokens=10,
                   messages=[{"role": "user", "content": "hi"}],
                   trace={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"})
    primary = ScriptedModel([overloaded()])
    fallback = ScriptedModel([{"text": "an answer in words", "usage": {"input_tokens": 9, "output_tokens": 4}}])
    models = {"p": primary, "f": fallback}
    duration = 'loopwire_llm_request_duration_seconds_count'
    before = metrics.REGISTRY.get_sample_value(duration, {"model": "f"}) or 0.0
    runner = FallbackModel({m: InstrumentedModel(model, env) for m, model in models.items()})
    response = await Streamed().run(runner, model_request(env, "p"))
    assert response.model == "f"

    failed, ok = spans.get_finished_spans()
    assert (failed.name, ok.name) == ("chat p", "chat f")
    assert {format(s.context.trace_id, "032x") for s in (failed, ok)} == {trace_id}
    assert failed.status.status_code.name == "ERROR"
    attrs = dict(ok.attributes or {})
    assert attrs["gen_ai.request.model"] == "f" and attrs["gen_ai.conversation.id"] == "s1"
    assert attrs["gen_ai.usage.input_tokens"] == 9 and attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert metrics.REGISTRY.get_sample_value(duration, {"model": "f"}) == before + 1
