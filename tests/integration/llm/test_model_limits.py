"""The model limits on a real redis-server: the fleet-wide budget's scripts
(shared/stores/model_budget.py) and the limited model in a fallback chain
(services/llm/limiter.py), with replicas played by several limiters on one Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from loopwire.llm.errors import ModelCallError
from loopwire.llm.fallback import FallbackModel
from loopwire.llm.limiter import LimitedModel, ModelLimiter
from loopwire.llm.model_call import ModelRequest
from loopwire.llm.model_events import Admitted, ModelSwitched, Throttled
from loopwire.llm.retrying import RetryingModel, RetryPolicy
from loopwire.llm.scripted_model import ScriptedModel
from loopwire.shared.contract import keys
from loopwire.shared.contract.model_limits import ModelLimit, ModelLimits
from loopwire.shared.stores.model_budget import ModelLimitStore
from tests.model_streams import Streamed

pytestmark = pytest.mark.integration


async def _no_sleep(_: float) -> None:
    return None


def request(model: str = "m", max_tokens: int = 100) -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=max_tokens)


class LoopbackNats:
    """The wake subject between limiters in one test: a publish reaches every subscriber."""

    def __init__(self) -> None:
        self.subscribers: list[Any] = []

    async def subscribe(self, subject: str, cb: Any) -> Any:
        self.subscribers.append(cb)
        return self

    async def unsubscribe(self) -> None:
        return None

    async def publish(self, subject: str, data: bytes) -> None:
        for cb in self.subscribers:
            await cb(type("Msg", (), {"data": data})())


async def test_max_concurrent_admits_the_queue_head_when_a_request_ends(redis_client: Any) -> None:
    store = ModelLimitStore(redis_client)
    limit = ModelLimit(max_concurrent=2)
    first = await store.admit("k", limit, "a", tenant="*", input_tokens=10, output_tokens=10)
    second = await store.admit("k", limit, "b", tenant="*", input_tokens=10, output_tokens=10)
    third = await store.admit("k", limit, "c", tenant="*", input_tokens=10, output_tokens=10)
    fourth = await store.admit("k", limit, "d", tenant="*", input_tokens=10, output_tokens=10)
    assert first.admitted and second.admitted
    assert (third.admitted, third.reason, fourth.reason) == (False, "concurrency", "concurrency")
    again = await store.admit("k", limit, "a", tenant="*", input_tokens=10, output_tokens=10)
    assert again.admitted, "the same lease asking again (a redelivery) is not counted twice"
    assert (await store.usage("k", limit))["in_flight"] == 2
    woken = await store.release("k", limit, "a", second=first.second)
    assert woken == ["c"], "one slot free: the head of the queue, not the one behind it"
    assert not (await store.admit("k", limit, "d", tenant="*", input_tokens=10, output_tokens=10)).admitted
    assert (await store.admit("k", limit, "c", tenant="*", input_tokens=10, output_tokens=10)).admitted
    usage = await store.usage("k", limit)
    assert (usage["in_flight"], usage["waiting"], usage["requests_last_60s"]) == (2, 1, 3)


async def test_tenants_take_turns_in_the_queue(redis_client: Any) -> None:
    store = ModelLimitStore(redis_client)
    limit = ModelLimit(max_concurrent=1)
    assert (await store.admit("k", limit, "busy", tenant="a", input_tokens=1, output_tokens=1)).admitted
    for n in range(3):
        assert not (await store.admit("k", limit, f"a{n}", tenant="a", input_tokens=1, output_tokens=1)).admitted
    assert not (await store.admit("k", limit, "b0", tenant="b", input_tokens=1, output_tokens=1)).admitted
    order = [m.decode() if isinstance(m, bytes) else m
             for m in await redis_client.zrange(keys.model_limit("k", "waiting"), 0, -1)]
    assert order.index("b0") <= 1, f"tenant b's one waiter is behind all of tenant a's: {order}"
    assert order.index("a0") < order.index("a1") < order.index("a2"), "within a tenant, arrival order"


async def test_rpm_and_token_windows(redis_client: Any) -> None:
    store = ModelLimitStore(redis_client)
    rpm = ModelLimit(rpm=2)
    assert (await store.admit("r", rpm, "1", tenant="*", input_tokens=1, output_tokens=1)).admitted
    assert (await store.admit("r", rpm, "2", tenant="*", input_tokens=1, output_tokens=1)).admitted
    third = await store.admit("r", rpm, "3", tenant="*", input_tokens=1, output_tokens=1)
    assert (third.admitted, third.reason) == (False, "rpm")
    assert 59 <= third.wait_s <= 61.5, "the window's oldest request leaves it after 60 s"
    tpm = ModelLimit(input_tpm=100, output_tpm=1000)
    big = await store.admit("t", tpm, "big", tenant="*", input_tokens=80, output_tokens=100)
    assert big.admitted
    over = await store.admit("t", tpm, "next", tenant="*", input_tokens=50, output_tokens=100)
    assert (over.admitted, over.reason) == (False, "input_tpm")
    await store.release("t", tpm, "big", second=big.second, input_delta=-60, output_delta=-90)  # it used 20 and 10
    assert (await store.admit("t", tpm, "next", tenant="*", input_tokens=50, output_tokens=100)).admitted
    usage = await store.usage("t", tpm)
    assert usage["input_tokens_last_60s"] == 70
    alone = ModelLimit(output_tpm=10)
    assert (await store.admit("o", alone, "huge", tenant="*", input_tokens=1, output_tokens=500)).admitted, \
        "a request larger than the whole limit goes when the window is empty"


async def test_a_cooldown_holds_every_request_until_it_passes(redis_client: Any) -> None:
    store = ModelLimitStore(redis_client)
    limit = ModelLimit()
    await store.cool_down("c", 0.5)
    held = await store.admit("c", limit, "x", tenant="*", input_tokens=1, output_tokens=1)
    assert (held.admitted, held.reason) == (False, "cooldown") and 0 < held.wait_s <= 0.5
    assert (await store.usage("c", limit))["cooldown_until"] > time.time()
    await asyncio.sleep(0.55)
    assert (await store.admit("c", limit, "x", tenant="*", input_tokens=1, output_tokens=1)).admitted


def limiter_on(redis_client: Any, table: dict[str, ModelLimit], *, wait_max_s: float = 60.0) -> ModelLimiter:
    return ModelLimiter(ModelLimits.parse(table), ModelLimitStore(redis_client), wake_subject="wake",
                        wait_max_s=wait_max_s, redis=redis_client)


async def test_two_replicas_share_one_slot_and_the_waiter_is_woken(redis_client: Any) -> None:
    nats = LoopbackNats()
    replicas = [limiter_on(redis_client, {"claude-*": ModelLimit(max_concurrent=1)}) for _ in range(2)]
    for limiter in replicas:
        await limiter.start_with(nats)
    key, limit = replicas[0].rule("claude-x")  # type: ignore[misc]
    assert key == "claude-*" and replicas[0].rule("gpt") is None
    slow = ScriptedModel([{"text": "first", "delay_s": 0.5}])
    fast = ScriptedModel([{"text": "second"}])
    streams = [Streamed(), Streamed()]
    models = [LimitedModel(slow, replicas[0], key, limit=limit, session_id="s1", step_id="r1:1:g1", input_tokens=5),
              LimitedModel(fast, replicas[1], key, limit=limit, session_id="s2", step_id="r2:1:g1", input_tokens=5)]
    started = time.monotonic()
    first = asyncio.create_task(streams[0].run(models[0], request("claude-x")))
    await asyncio.sleep(0.1)
    waiting_seen = asyncio.create_task(_seen_waiting(redis_client, "s2"))
    second = await streams[1].run(models[1], request("claude-x"))
    elapsed = time.monotonic() - started
    await first
    assert second.message["content"][0]["text"] == "second"
    assert 0.4 < elapsed < 3.0, f"woken by the release (not the 10 s poll): {elapsed:.2f} s"
    assert [type(e) for e in streams[0].events[:1]] == [Admitted]
    throttled = streams[1].of(Throttled)
    assert [t.reason for t in throttled] == ["concurrency"]
    assert streams[1].events.index(throttled[0]) < streams[1].events.index(streams[1].of(Admitted)[0])
    assert await waiting_seen, "the session's model_wait key was set while it waited"
    assert not await redis_client.exists(keys.model_wait("s2")), "and cleared once it was admitted"
    assert (await replicas[0].store.usage(key, limit))["in_flight"] == 0
    for limiter in replicas:
        await limiter.stop()


async def _seen_waiting(redis_client: Any, sid: str) -> bool:
    for _ in range(40):
        if await redis_client.exists(keys.model_wait(sid)):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_429_cools_the_entry_down_and_waiting_past_the_maximum_falls_back(redis_client: Any) -> None:
    limiter = limiter_on(redis_client, {"primary": ModelLimit(max_concurrent=1)}, wait_max_s=0.3)
    await limiter.start_with(LoopbackNats())
    key, limit = limiter.rule("primary")  # type: ignore[misc]
    refused = ModelCallError("rate_limited", "slow down", True, status=429, retry_after_s=5.0)
    held = LimitedModel(ScriptedModel([refused]), limiter, key, limit=limit, session_id="s", step_id="r:1:g1",
                        input_tokens=1)
    with pytest.raises(ModelCallError):
        await Streamed().run(held, request("primary"))
    assert (await limiter.store.usage(key, limit))["cooldown_until"] is not None
    primary = ScriptedModel([{"text": "never"}])
    backup = ScriptedModel([{"text": "from the backup"}])
    chain = FallbackModel({
        "primary": RetryingModel(LimitedModel(primary, limiter, key, limit=limit, session_id="s", step_id="r:2:g1",
                                              input_tokens=1), RetryPolicy(max_retries=2), sleep=_no_sleep),
        "backup": RetryingModel(backup, RetryPolicy(max_retries=2), sleep=_no_sleep)})
    streamed = Streamed()
    started = time.monotonic()
    answer = await streamed.run(chain, request("primary"))
    assert answer.message["content"][0]["text"] == "from the backup"
    assert time.monotonic() - started < 2.0, "waited once, not again for each retry"
    assert primary.requests == [], "the cooling model was never called"
    assert [t.reason for t in streamed.of(Throttled)] == ["cooldown"]
    [switch] = streamed.of(ModelSwitched)
    assert switch.reason.startswith("rate_limited: waited")
    assert (await limiter.store.usage(key, limit))["waiting"] == 0, "the waiter left the queue"
    await limiter.stop()
