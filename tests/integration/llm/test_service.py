"""The llm service end to end on real NATS (JetStream) and Redis, with the Anthropic SDK
talking to the fake Messages API: streamed deltas, recorded and published results,
idempotent replays, fallbacks, failures, redelivery and malformed input."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from loopwire.llm.generation import record_key
from loopwire.llm.providers import ModelFactory, build_model_factory
from loopwire.llm.service import REDELIVERED_REASON, LlmService
from loopwire.settings import Settings
from loopwire.shared.contract import codec
from loopwire.shared.contract.envelopes import Generate, GenerationResult, ToolSpec
from loopwire.shared.contract.subjects import WORK_STREAM, stream_name
from loopwire.shared.runtime.service_context import ServiceContext, build_context
from loopwire.shared.runtime.streams import ensure_streams
from loopwire.testing.servers import ServerHandle
from tests.event_collector import Events, watch_session
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    settings: Settings
    ctx: ServiceContext
    service: LlmService
    nc: NatsClient
    js: JetStreamContext
    results: Any
    fake: FakeAnthropic
    events: Events
    sid: str

    def generate(self, text: str = "hello", models: list[str] | None = None, turn: int = 1,
                 **kw: Any) -> Generate:
        return Generate(session_id=self.sid, run_id="run1", step_id=f"run1:{turn}:g{uuid.uuid4().hex[:6]}",
                        turn=turn, trace={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                        models=models or ["claude-a"], messages=[{"role": "user", "content": text}],
                        max_tokens=256, **kw)

    async def send(self, env: Generate) -> None:
        """A new publish of `env` (every delivery claims its step, so a repeated step is
        answered from its record whatever way it arrives)."""
        await self.ctx.bus.publish_work(self.ctx.subjects.llm_generate, env, msg_id=f"{env.step_id}:{uuid.uuid4().hex}")

    async def consumer_settled(self, deliveries: int, timeout: float = 5.0) -> Any:
        """The llm consumer's info once it has delivered `deliveries` messages and every one
        is acked (a bounded poll: JetStream pushes no event for an ack)."""
        stream = stream_name(self.settings.subject_prefix, WORK_STREAM)
        consumer = f"{self.settings.subject_prefix}_llm"

        async def settled() -> Any:
            while True:
                info = await self.js.consumer_info(stream, consumer)
                if info.delivered.consumer_seq >= deliveries and info.num_ack_pending == 0:
                    return info
                await asyncio.sleep(0.02)

        return await asyncio.wait_for(settled(), timeout)

    async def pending_results(self) -> int:
        info = await self.js.consumer_info(stream_name(self.settings.subject_prefix, WORK_STREAM), "test_results")
        return int(info.num_pending)

    async def next_result(self, timeout: float = 10.0) -> GenerationResult:
        (msg,) = await self.results.fetch(1, timeout=timeout)
        await msg.ack()
        return GenerationResult.model_validate(codec.loads(msg.data))


@pytest.fixture
async def stack(nats_server: ServerHandle, redis_server: ServerHandle, redis_client: Any, prefix: str,
                anthropic_server: FakeAnthropic) -> AsyncIterator[Stack]:  # noqa: F811
    settings = Settings(subject_prefix=prefix, nats_url=nats_server.url, redis_url=redis_server.url,
                        llm_provider="anthropic", llm_retry_base_delay_s=0.01, llm_retry_max_delay_s=0.02,
                        ack_wait_s=5.0)
    factory: ModelFactory = build_model_factory(settings, {"ANTHROPIC_BASE_URL": anthropic_server.url})
    broker = NatsBroker(settings.nats_url)
    ctx = build_context(settings, broker)
    service = LlmService(ctx, model_factory=factory)
    service.register(broker)
    await broker.connect()
    assert broker._connection is not None
    await ensure_streams(broker._connection.jetstream(), settings)
    ctx.attach_bus()
    await broker.start()
    await ctx.consume()
    await service.start()

    sid, nc, js, events, results = await watch_session(ctx, ctx.subjects.router_result, "test_results")
    yield Stack(settings, ctx, service, nc, js, results, anthropic_server, events, sid)
    await nc.close()
    await service.stop()
    await ctx.stop_consuming(5)
    await broker.stop()
    await factory.aclose()
    await ctx.redis.aclose()


async def test_generation_streams_records_publishes_and_replays_without_a_model_call(stack: Stack) -> None:
    text = "Hello from the fake Claude, streamed in several small pieces."
    stack.fake.script("*", [{"text": text, "usage": {"input_tokens": 42, "output_tokens": 12}}])
    env = stack.generate("Say hello", system="be kind",
                         tools=[ToolSpec(name="calculator", description="math")], temperature=0.5)
    await stack.send(env)
    result = await stack.next_result()

    assert result.ok and result.error is None
    assert result.message == {"role": "assistant", "content": [{"type": "text", "text": text}]}
    assert (result.stop_reason, result.model) == ("end_turn", "claude-a")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (42, 12)
    assert (result.session_id, result.run_id, result.step_id, result.turn, result.trace) == \
        (env.session_id, env.run_id, env.step_id, env.turn, env.trace)

    deltas = await stack.events.wait_for("text.delta")
    assert len(deltas) > 1 and "".join(d["text"] for d in deltas) == text
    assert all(d["turn"] == 1 and d["run_id"] == "run1" and d["v"] == 1 for d in deltas)
    seqs = [d["seq"] for d in deltas]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    recorded = await stack.ctx.steps.get(record_key(env))
    assert recorded is not None and GenerationResult.model_validate(recorded) == result
    (sent,) = stack.fake.message_requests
    assert (sent["system"], sent["temperature"], sent["tools"][0]["name"]) == ("be kind", 0.5, "calculator")

    # The same step again (a new publish, so JetStream does not dedup the request): its
    # claim finds the record, so no second model call, no new deltas; the republished
    # result carries the same Nats-Msg-Id, so the router does not get it twice.
    await stack.send(env)
    await stack.consumer_settled(deliveries=2)
    assert len(stack.fake.message_requests) == 1
    assert len(stack.events.of("text.delta")) == len(deltas)
    assert await stack.pending_results() == 0


async def test_a_recorded_but_unpublished_step_is_published_from_its_record(stack: Stack) -> None:
    # A crash after the record and before the publish: the redelivery publishes the record.
    env = stack.generate()
    recorded = GenerationResult(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn,
                                message={"role": "assistant", "content": [{"type": "text", "text": "recorded"}]},
                                stop_reason="end_turn", model="claude-a")
    await stack.ctx.steps.put(record_key(env), recorded.model_dump(mode="json"))
    await stack.send(env)
    assert await stack.next_result() == recorded
    assert stack.fake.message_requests == [] and stack.events.of("text.delta") == []


async def test_fallback_is_announced_and_recorded(stack: Stack) -> None:
    stack.fake.fail_next(529, n=None, model="claude-a")
    stack.fake.script("claude-b", [{"text": "the fallback speaks",
                                    "tool_use": [{"name": "calculator", "input": {"expression": "2+2"}}]}])
    env = stack.generate(models=["claude-a", "claude-b"])
    await stack.send(env)
    result = await stack.next_result()
    assert result.ok and result.model == "claude-b" and result.stop_reason == "tool_use"
    assert result.message is not None and result.message["content"][1]["input"] == {"expression": "2+2"}
    switch = {"from_model": "claude-a", "to_model": "claude-b", "reason": "model_overloaded: Overloaded"}
    assert result.fallbacks == [switch]
    (event,) = await stack.events.wait_for("model.fallback")
    assert {k: event[k] for k in switch} == switch and event["run_id"] == "run1"
    assert [r["model"] for r in stack.fake.message_requests] == ["claude-a"] * 3 + ["claude-b"]


async def test_a_failed_call_is_a_result_not_a_redelivery(stack: Stack) -> None:
    stack.fake.fail_next(400, message="max_tokens: must be at most 64000")
    env = stack.generate(models=["claude-a", "claude-b"])
    await stack.send(env)
    result = await stack.next_result()
    assert not result.ok and result.message is None and result.error is not None
    assert (result.error.code, result.error.retryable, result.error.status, result.error.model) == \
        ("bad_request", False, 400, "claude-a")
    assert "64000" in result.error.message
    assert await stack.ctx.steps.get(record_key(env)) is not None
    assert len(stack.fake.message_requests) == 1


async def test_a_step_claimed_before_retracts_its_partial_answer_first(stack: Stack) -> None:
    # An earlier attempt claimed the step and recorded nothing (its worker died or froze
    # mid-stream: its claim is gone): whatever it streamed is void.
    stack.fake.script("*", [{"text": "a fresh answer"}])
    env = stack.generate(turn=4)
    earlier = await stack.ctx.steps.claim(record_key(env), [record_key(env)], 30)
    assert earlier.token is not None and earlier.attempt == 1
    await stack.ctx.steps.release(record_key(env), earlier.token)
    result = await stack.service.process(env)
    assert result.ok
    (retracted,) = await stack.events.wait_for("retracted")
    assert retracted["turn"] == 4 and retracted["reason"] == REDELIVERED_REASON
    deltas = await stack.events.wait_for("text.delta")
    assert retracted["seq"] < deltas[0]["seq"]
    assert (await stack.next_result()).step_id == env.step_id


async def test_malformed_envelopes_are_terminated_not_redelivered(stack: Stack) -> None:
    subject = stack.ctx.subjects.llm_generate
    await stack.js.publish(subject, b"{not json", headers={"Nats-Msg-Id": "bad-1"})
    await stack.js.publish(subject, codec.dumps({"kind": "llm.generate", "session_id": stack.sid}),
                           headers={"Nats-Msg-Id": "bad-2"})
    stack.fake.script("*", [{"text": "still serving"}])
    env = stack.generate()
    await stack.send(env)
    result = await stack.next_result()
    assert result.ok and result.step_id == env.step_id
    info = await stack.consumer_settled(deliveries=3)
    assert info.num_redelivered == 0 and info.delivered.consumer_seq == 3 and info.num_pending == 0
    assert len(stack.fake.message_requests) == 1


async def test_heartbeats_keep_a_slow_generation_from_being_redelivered(
        stack: Stack, nats_server: ServerHandle, prefix: str) -> None:
    # A second service with a short AckWait on its own prefix: the stream takes ~1.2 s,
    # twice the AckWait; without in_progress() JetStream would deliver it again.
    settings = stack.settings.model_copy(update={"subject_prefix": f"{prefix}hb", "ack_wait_s": 0.6})
    factory = build_model_factory(settings, {"ANTHROPIC_BASE_URL": stack.fake.url})
    broker = NatsBroker(settings.nats_url)
    ctx = build_context(settings, broker)
    LlmService(ctx, model_factory=factory).register(broker)
    await broker.connect()
    assert broker._connection is not None
    await ensure_streams(broker._connection.jetstream(), settings)
    ctx.attach_bus()
    await broker.start()
    await ctx.consume()
    try:
        words = " ".join(f"word{i}" for i in range(36))  # 12 chunks of 3 words
        stack.fake.script("*", [{"text": words, "chunk_delay_s": 0.1}])
        results = await stack.js.pull_subscribe(ctx.subjects.router_result, durable="hb_results",
                                                stream=stream_name(settings.subject_prefix, WORK_STREAM))
        env = stack.generate()
        await ctx.bus.publish_work(ctx.subjects.llm_generate, env, msg_id=env.step_id)
        (msg,) = await results.fetch(1, timeout=10)
        result = GenerationResult.model_validate(codec.loads(msg.data))
        assert result.ok and result.message is not None
        assert result.message["content"][0]["text"] == words
        assert len(stack.fake.message_requests) == 1, "the slow step was not delivered twice"
        info = await stack.js.consumer_info(stream_name(settings.subject_prefix, WORK_STREAM),
                                            f"{settings.subject_prefix}_llm")
        assert info.num_redelivered == 0
    finally:
        await ctx.stop_consuming(5)
        await broker.stop()
        await factory.aclose()
        await ctx.redis.aclose()


async def test_a_cancel_notice_stops_the_generation_and_retracts_its_text(stack: Stack) -> None:
    words = " ".join(f"w{i}" for i in range(60))  # 20 chunks, 0.1 s apart: 2 s if not stopped
    stack.fake.script("*", [{"text": words, "chunk_delay_s": 0.1}])
    env = stack.generate(turn=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await stack.send(env)
    await stack.events.wait_for("text.delta")
    await stack.nc.publish(stack.ctx.subjects.cancel(stack.sid), codec.dumps({"run_id": "run1"}))
    result = await stack.next_result()
    assert loop.time() - started < 1.5, "stopped well before the stream's end"
    assert not result.ok and result.error is not None and result.error.code == "cancelled"
    (retracted,) = await stack.events.wait_for("retracted")
    assert retracted["turn"] == 2 and retracted["reason"] == "cancelled: the partial answer is void"
    assert await stack.ctx.steps.get(record_key(env)) is None, "a cancelled step is not recorded"
    assert len(stack.service._inflight) == 0
