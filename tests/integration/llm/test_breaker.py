"""The circuit breaker: closed -> open -> half-open (one probe) -> closed or open again,
with a fake clock, against the in-memory store and the Redis store alike; and its gate in
the fallback chain, each model wrapped in a CircuitBreakerModel (an open primary is skipped
with reason `circuit_open`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopwire.llm.breaker import BreakerGate, CircuitBreaker, CircuitBreakerModel, breaker_from_settings
from loopwire.llm.breaker_store import BreakerPolicy, MemoryBreakerStore, RedisBreakerStore
from loopwire.llm.errors import ModelCallError
from loopwire.llm.fallback import FallbackModel
from loopwire.llm.model import Model
from loopwire.llm.model_call import ModelRequest
from loopwire.llm.retrying import RetryingModel, RetryPolicy
from loopwire.llm.scripted_model import ScriptedModel
from loopwire.settings import Settings
from loopwire.shared.contract import keys
from loopwire.shared.observability import metrics
from tests.model_streams import Streamed

pytestmark = pytest.mark.integration

POLICY = BreakerPolicy(failure_threshold=3, cooldown_s=30.0, probe_ttl_s=60.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, redis_client: Any) -> Any:
    return MemoryBreakerStore() if request.param == "memory" else RedisBreakerStore(redis_client)


def breaker(store: Any, clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(store, POLICY, clock)


def behind(gate: BreakerGate, models: dict[str, Model], policy: RetryPolicy) -> FallbackModel:
    """The fallback chain: each model retried and behind the request's gate, as the service
    builds it (step_chain.py)."""
    return FallbackModel({model_id: RetryingModel(CircuitBreakerModel(model, model_id, gate), policy, sleep=_no_sleep)
                          for model_id, model in models.items()})


async def fail(b: CircuitBreaker, model: str, n: int = 1) -> None:
    for _ in range(n):
        gate = await b.gate([model])
        gate.record_failure(model)
        await gate.close()


async def test_consecutive_failures_open_the_breaker_and_a_success_resets_the_count(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    await fail(b, "m", 2)
    gate = await b.gate(["m"])
    assert gate.allow("m")
    gate.record_success("m")
    await gate.close()
    await fail(b, "m", 2)
    assert await b.state("m") == "closed", "the success reset the count: 2 < 3"
    await fail(b, "m", 1)
    assert await b.state("m") == "open"
    gate = await b.gate(["m", "other"])
    assert not gate.allow("m") and gate.allow("other")
    await gate.close()
    assert metrics.REGISTRY.get_sample_value("loopwire_circuit_breaker_state", {"model": "m"}) == 2


async def test_after_the_cool_down_one_probe_goes_through_and_its_success_closes(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    await fail(b, "m", 3)
    clock.now += 29
    assert not (await b.gate(["m"])).allow("m"), "still cooling down"
    clock.now += 2
    assert await b.state("m") == "half_open"
    probe = await b.gate(["m"])
    other_replica = await b.gate(["m"])
    assert probe.allow("m") and not other_replica.allow("m"), "exactly one probe fleet-wide"
    assert metrics.REGISTRY.get_sample_value("loopwire_circuit_breaker_state", {"model": "m"}) == 2
    probe.record_success("m")
    await probe.close()
    await other_replica.close()
    assert await b.state("m") == "closed"
    assert (await b.gate(["m"])).allow("m")


async def test_a_failed_probe_opens_the_breaker_for_another_cool_down(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    await fail(b, "m", 3)
    clock.now += 31
    probe = await b.gate(["m"])
    assert probe.allow("m")
    probe.record_failure("m")
    await probe.close()
    assert await b.state("m") == "open"
    clock.now += 29
    assert not (await b.gate(["m"])).allow("m")
    clock.now += 2
    assert (await b.gate(["m"])).allow("m"), "the next probe after the new cool-down"


async def test_an_unused_probe_claim_is_released_and_a_lost_one_expires(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    await fail(b, "fallback", 3)
    clock.now += 31
    gate = await b.gate(["primary", "fallback"])
    assert gate.allow("fallback") and gate.probes == {"fallback"}
    gate.record_success("primary")  # the primary answered: the fallback's probe was never used
    await gate.close()
    assert (await b.gate(["fallback"])).allow("fallback"), "released: another request may probe"
    # a replica that claimed the probe and died: the claim expires after probe_ttl_s
    clock.now += 1
    assert not (await b.gate(["fallback"])).allow("fallback")
    clock.now += POLICY.probe_ttl_s + 1
    assert (await b.gate(["fallback"])).allow("fallback")


async def test_a_disabled_breaker_allows_everything() -> None:
    b = CircuitBreaker(MemoryBreakerStore(), BreakerPolicy(failure_threshold=0))
    for _ in range(10):
        gate = await b.gate(["m"])
        gate.record_failure("m")
        await gate.close()
    assert (await b.gate(["m"])).allow("m")


async def test_an_open_primary_is_skipped_with_a_circuit_open_fallback(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    await fail(b, "p", 3)
    gate = await b.gate(["p", "f"])
    primary, fallback = ScriptedModel(), ScriptedModel([{"text": "from f"}])
    runner = behind(gate, {"p": primary, "f": fallback}, RetryPolicy(base_delay_s=0))
    result = Streamed()
    response = await result.run(runner, ModelRequest(model="p", messages=[{"role": "user", "content": "hi"}],
                                                     max_tokens=10))
    await gate.close()
    assert primary.requests == [] and response.text() == "from f"
    assert result.fallbacks[0]["reason"].startswith("circuit_open")
    assert await b.state("f") == "closed"


async def test_retryable_failures_in_the_chain_open_the_breaker_for_the_next_request(store: Any) -> None:
    clock = Clock()
    b = breaker(store, clock)
    overloaded = ModelCallError("model_overloaded", "Overloaded", True, status=529)
    gate = await b.gate(["p", "f"])
    runner = behind(gate, {"p": ScriptedModel([overloaded] * 3), "f": ScriptedModel([{"text": "ok"}])},
                    RetryPolicy(max_retries=2, base_delay_s=0))
    await runner.generate(ModelRequest(model="p", messages=[{"role": "user", "content": "hi"}], max_tokens=10))
    await gate.close()
    assert await b.state("p") == "open"
    bad = ModelCallError("bad_request", "max_tokens too large", False, status=400)
    gate = await b.gate(["q"])
    with pytest.raises(ModelCallError):
        await behind(gate, {"q": ScriptedModel([bad])}, RetryPolicy()).generate(
            ModelRequest(model="q", messages=[], max_tokens=1))
    await gate.close()
    assert await b.state("q") == "closed", "a 400 says nothing about the model's health"


async def test_redis_keeps_one_state_for_every_replica(redis_client: Any) -> None:
    clock = Clock()
    replica_a = CircuitBreaker(RedisBreakerStore(redis_client), POLICY, clock)
    replica_b = CircuitBreaker(RedisBreakerStore(redis_client), POLICY, clock)
    await fail(replica_a, "m", 2)
    await fail(replica_b, "m", 1)
    assert await replica_a.state("m") == "open"
    assert 0 < await redis_client.ttl(keys.breaker("m")) <= 24 * 3600
    b = breaker_from_settings(Settings(llm_breaker_failures=7, llm_breaker_cooldown_s=3), redis_client)
    assert b.policy == BreakerPolicy(failure_threshold=7, cooldown_s=3, probe_ttl_s=120.0)


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)
