"""The fallback chain over retrying models: retries with jittered, capped backoff, the switch
to the next model, the breaker's gate, and what a streamed answer means for a retry. Sleeps
are injected."""

from __future__ import annotations

import random
from contextlib import aclosing

import pytest

from loopwire.llm.breaker import CircuitBreakerModel
from loopwire.llm.errors import ModelCallError
from loopwire.llm.fallback import FallbackModel
from loopwire.llm.model import Model
from loopwire.llm.model_call import ModelRequest
from loopwire.llm.model_events import ModelStream, ModelSwitched, TextDelta
from loopwire.llm.retrying import RetryingModel, RetryPolicy
from loopwire.llm.scripted_model import (
    ScriptedModel,
)
from tests.model_streams import Streamed
from tests.unit.llm.model_calls import Sleeps, overloaded, req

pytestmark = pytest.mark.unit


# -- fallback chain ---------------------------------------------------------------------------


def chain(models: dict[str, Model], policy: RetryPolicy | None = None) -> tuple[FallbackModel, Sleeps]:
    """The chain over `models`, each retried (as step_chain.py builds it)."""
    sleeps = Sleeps()
    rng = random.Random(7)
    runner = FallbackModel({m: RetryingModel(model, policy or RetryPolicy(2, 0.1, 1.0), sleep=sleeps, rng=rng)
                            for m, model in models.items()})
    return runner, sleeps


def test_retry_policy_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(max_retries=5, base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(1)
    for retry, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delay = policy.delay(retry, rng=rng)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(0, retry_after_s=3.0, rng=rng) == 3.0
    assert policy.delay(0, retry_after_s=60.0, rng=rng) == 4.0


async def test_fallback_retries_then_succeeds_on_the_same_model() -> None:
    primary = ScriptedModel([overloaded(), overloaded(), {"text": "finally"}])
    runner, sleeps = chain({"p": primary, "f": ScriptedModel()})
    result = Streamed()
    response = await result.run(runner, req())
    assert response.text() == "finally" and response.model == "p"
    assert result.fallbacks == [] and result.attempts == 3
    assert len(sleeps.delays) == 2 and sleeps.delays[0] < sleeps.delays[1] * 2


async def test_fallback_switches_after_retries_are_exhausted() -> None:
    primary = ScriptedModel([overloaded()] * 3)
    fallback = ScriptedModel([{"text": "from the fallback"}])
    runner, sleeps = chain({"p": primary, "f": fallback})
    result = Streamed()
    response = await result.run(runner, req())
    seen = [e.as_dict() for e in result.of(ModelSwitched)]
    assert response.text() == "from the fallback" and response.model == "f"
    assert result.fallbacks == seen == [{"from_model": "p", "to_model": "f", "reason": "model_overloaded: Overloaded"}]
    assert result.started == ["p", "f"], "once per model, not per retry (the llm service's `generating` event)"
    assert result.attempts == 4 and len(sleeps.delays) == 2  # no sleep before switching
    assert [r.model for r in fallback.requests] == ["f"]
    primary.assert_done()


async def test_non_retryable_error_stops_at_once() -> None:
    primary = ScriptedModel([ModelCallError("bad_request", "messages: required", False, status=400)])
    fallback = ScriptedModel()  # any call would raise ScriptExhausted
    runner, sleeps = chain({"p": primary, "f": fallback})
    with pytest.raises(ModelCallError) as info:
        await runner.generate(req())
    assert info.value.code == "bad_request" and info.value.fallbacks == []
    assert fallback.requests == [] and sleeps.delays == []


async def test_all_models_failing_raise_the_last_error_with_the_switches() -> None:
    runner, _ = chain({"p": ScriptedModel([overloaded()] * 3),
                       "f": ScriptedModel([ModelCallError("rate_limited", "slow", True, status=429)] * 3)})
    with pytest.raises(ModelCallError) as info:
        await runner.generate(req())
    assert info.value.code == "rate_limited" and info.value.model == "f"
    assert [(s["from_model"], s["to_model"]) for s in info.value.fallbacks] == [("p", "f")]


async def test_breaker_gate_skips_a_model_and_hears_outcomes() -> None:
    class Gate:
        def __init__(self) -> None:
            self.log: list[tuple[str, str]] = []

        def allow(self, model: str) -> bool:
            return model != "p"

        def record_success(self, model: str) -> None:
            self.log.append(("ok", model))

        def record_failure(self, model: str) -> None:
            self.log.append(("fail", model))

    gate = Gate()
    primary = ScriptedModel()
    models: dict[str, Model] = {"p": primary, "f": ScriptedModel([overloaded(), {"text": "ok"}])}
    runner, _ = chain({m: CircuitBreakerModel(model, m, gate) for m, model in models.items()})
    result = Streamed()
    await result.run(runner, req())
    assert primary.requests == []
    assert result.fallbacks[0]["reason"].startswith("circuit_open")
    assert gate.log == [("fail", "f"), ("ok", "f")]


async def test_discard_after_streamed_text_and_consumer_errors_pass_through() -> None:
    class Streams(Model):
        calls = 0

        async def stream(self, request: ModelRequest) -> ModelStream:
            Streams.calls += 1
            yield TextDelta("partial ")
            if Streams.calls == 1:
                raise overloaded()
            async for event in ScriptedModel([{"text": "whole"}]).stream(request):
                yield event

    runner, _ = chain({"p": Streams()})
    sink = Streamed()
    response = await sink.run(runner, req())
    assert response.text() == "whole"
    assert sink.retracted == [("p", "model_overloaded: Overloaded")], "once, by the innermost wrapper"
    assert sink.pieces == ["partial ", "partial ", "whole"]

    # A failure of whoever reads the stream (publishing a delta) is not the model's: no
    # retry, and the model's stream is closed.
    closed: list[bool] = []

    class Watched(Model):
        async def stream(self, request: ModelRequest) -> ModelStream:
            try:
                async for event in ScriptedModel([{"text": "a b c d e f"}]).stream(request):
                    yield event
            finally:
                closed.append(True)

    runner, sleeps = chain({"p": Watched()})
    with pytest.raises(ConnectionError):
        async with aclosing(runner.stream(req())) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    raise ConnectionError("nats down")
    assert sleeps.delays == [] and closed == [True]
