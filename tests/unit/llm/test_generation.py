"""Envelope translation: a `Generate` to a model request, a response to a `GenerationResult`."""

from __future__ import annotations

import pytest

from loopwire.llm.errors import ModelCallError
from loopwire.llm.generation import model_chain, model_request, record_key, result_failed, result_ok
from loopwire.llm.model_call import ModelResponse
from loopwire.llm.model_events import Finished
from loopwire.shared.contract.envelopes import Generate, Usage
from tests.unit.llm.model_calls import CALC

pytestmark = pytest.mark.unit


# -- envelope translation ---------------------------------------------------------------------
def test_generation_envelopes() -> None:
    env = Generate(session_id="s1", run_id="r1", step_id="r1:3:g0", turn=3, trace={"traceparent": "00-x"},
                   models=["a", "b", "a"], system="sys", messages=[{"role": "user", "content": "hi"}],
                   tools=[CALC], max_tokens=64, temperature=0.3)
    assert model_chain(env, "d") == ["a", "b"]
    assert model_chain(env.model_copy(update={"models": []}), "d") == ["d"]
    request = model_request(env, "d")
    assert (request.model, request.system, request.max_tokens, request.temperature) == ("a", "sys", 64, 0.3)
    assert request.tools == [CALC]
    assert record_key(env) == "gen:{s1}:r1:3:g0"

    response = ModelResponse(message={"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
                             stop_reason="end_turn", model="b", usage=Usage(input_tokens=5, output_tokens=1))
    switch = {"from_model": "a", "to_model": "b", "reason": "model_overloaded: Overloaded"}
    ok = result_ok(env, Finished(response, [switch]))
    assert ok.ok and ok.message == response.message and ok.model == "b" and ok.stop_reason == "end_turn"
    assert ok.usage.input_tokens == 5 and ok.fallbacks == [switch] and ok.step_id == "r1:3:g0"

    err = ModelCallError("model_overloaded", "Overloaded", True, status=529, model="b")
    err.fallbacks = [{"from_model": "a", "to_model": "b", "reason": "x"}]
    failed = result_failed(env, err)
    assert not failed.ok and failed.error is not None and failed.error.code == "model_overloaded"
    assert (failed.session_id, failed.run_id, failed.step_id, failed.turn, failed.trace) == \
        ("s1", "r1", "r1:3:g0", 3, {"traceparent": "00-x"})
    assert failed.fallbacks == err.fallbacks
