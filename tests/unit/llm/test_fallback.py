"""The fallback chain: retries with jittered, capped backoff, the switch to the next model,
the breaker's gate, and what a streamed answer means for a retry. Sleeps are injected."""

from __future__ import annotations

import random

import pytest

from loopwire.llm.breaker import CircuitBreakerModel
from loopwire.llm.errors import ModelCallError
from loopwire.llm.fallback import FallbackModel, RetryPolicy
from loopwire.llm.model import Model
from loopwire.llm.scripted_model import (
    ScriptedModel,
)
from tests.unit.llm.model_calls import Collect, Sleeps, overloaded, req

pytestmark = pytest.mark.unit


# -- fallback chain ---------------------------------------------------------------------------


def chain(models: dict[str, Model], policy: RetryPolicy | None = None, **kw: object) -> tuple[FallbackModel, Sleeps]:
    sleeps = Sleeps()
    runner = FallbackModel(list(models), models.__getitem__, policy or RetryPolicy(2, 0.1, 1.0),
                           sleep=sleeps, rng=random.Random(7), **kw)  # type: ignore[arg-type]
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
    result = await runner.run(req())
    assert result.response.text() == "finally" and result.response.model == "p"
    assert result.fallbacks == [] and result.attempts == 3
    assert len(sleeps.delays) == 2 and sleeps.delays[0] < sleeps.delays[1] * 2


async def test_fallback_switches_after_retries_are_exhausted() -> None:
    primary = ScriptedModel([overloaded()] * 3)
    fallback = ScriptedModel([{"text": "from the fallback"}])
    runner, sleeps = chain({"p": primary, "f": fallback})
    seen: list[dict[str, str]] = []

    async def on_switch(switch: dict[str, str]) -> None:
        seen.append(switch)

    started: list[str] = []

    async def on_start(model: str) -> None:  # the llm service's `generating` event
        started.append(model)

    result = await runner.run(req(), on_switch=on_switch, on_start=on_start)
    assert result.response.text() == "from the fallback" and result.response.model == "f"
    assert result.fallbacks == seen == [{"from_model": "p", "to_model": "f", "reason": "model_overloaded: Overloaded"}]
    assert started == ["p", "f"], "once per model, not per retry"
    assert result.attempts == 4 and len(sleeps.delays) == 2  # no sleep before switching
    assert [r.model for r in fallback.requests] == ["f"]
    primary.assert_done()


async def test_non_retryable_error_stops_at_once() -> None:
    primary = ScriptedModel([ModelCallError("bad_request", "messages: required", False, 400)])
    fallback = ScriptedModel()  # any call would raise ScriptExhausted
    runner, sleeps = chain({"p": primary, "f": fallback})
    with pytest.raises(ModelCallError) as info:
        await runner.run(req())
    assert info.value.code == "bad_request" and info.value.fallbacks == []
    assert fallback.requests == [] and sleeps.delays == []


async def test_all_models_failing_raise_the_last_error_with_the_switches() -> None:
    runner, _ = chain({"p": ScriptedModel([overloaded()] * 3),
                       "f": ScriptedModel([ModelCallError("rate_limited", "slow", True, 429)] * 3)})
    with pytest.raises(ModelCallError) as info:
        await runner.run(req())
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
    result = await runner.run(req())
    assert primary.requests == []
    assert result.fallbacks[0]["reason"].startswith("circuit_open")
    assert gate.log == [("fail", "f"), ("ok", "f")]


async def test_discard_after_streamed_text_and_callback_errors_pass_through() -> None:
    class Streams(Model):
        calls = 0

        async def generate(self, request, on_text=None):  # type: ignore[no-untyped-def]
            Streams.calls += 1
            assert on_text is not None
            await on_text("partial ")
            if Streams.calls == 1:
                raise overloaded()
            return await ScriptedModel([{"text": "whole"}]).generate(request, on_text)

    runner, _ = chain({"p": Streams()})
    discarded: list[tuple[str, str]] = []
    sink = Collect()

    async def on_discard(model: str, reason: str) -> None:
        discarded.append((model, reason))

    result = await runner.run(req(), sink, on_discard=on_discard)
    assert result.response.text() == "whole"
    assert discarded == [("p", "model_overloaded: Overloaded")]
    assert sink.pieces == ["partial ", "partial ", "whole"]

    async def broken_sink(piece: str) -> None:
        raise ConnectionError("nats down")

    runner, sleeps = chain({"p": ScriptedModel([{"text": "a b c d e f"}])})
    with pytest.raises(ConnectionError):
        await runner.run(req(), broken_sink)
    assert sleeps.delays == []
