"""The memory service on real NATS (JetStream) and Redis, with the llm service's summarize
and count_tokens responders (the memory service asks them over NATS) talking to the local
Messages API server: compaction
through the llm service, stored and reused, its cost handed to the run, the fallback when
no summary comes, the pressure note, observations and reflections in the background."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient

from loopwire.llm.providers import build_model_factory
from loopwire.llm.retrying import RetryPolicy
from loopwire.llm.summarize import SummarizeResponder
from loopwire.llm.token_count import AnthropicTokenCount, TokenCountResponder
from loopwire.memory.assembly import normalise_messages
from loopwire.memory.compaction import SUMMARY_SYSTEM, CompactionRecord
from loopwire.memory.observations import OBSERVATION_SYSTEM, REFLECTION_SYSTEM
from loopwire.memory.service import MemoryService
from loopwire.settings import Settings
from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.envelopes import AssembleContext, Generate, Usage
from loopwire.shared.contract.subjects import WORK_STREAM, stream_name
from loopwire.shared.runtime.service_context import ServiceContext, build_context
from loopwire.shared.runtime.streams import ensure_streams
from loopwire.testing.servers import ServerHandle
from tests.event_collector import Events, watch_session
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server, count_tokens  # noqa: F401 - fixture
from tests.memory_helpers import assert_valid_request, conversation

pytestmark = pytest.mark.integration


def respond(body: dict[str, Any]) -> dict[str, Any] | None:
    """The model behind the summaries: it reads the request like a model would."""
    system = body.get("system")
    seen = str(body.get("messages"))
    if system == SUMMARY_SYSTEM:
        return {"text": "Summary: the user asked questions 1 onwards." + (" answer 0 was given." if "answer 0 " in seen
                                                                            else "")}
    if system == OBSERVATION_SYSTEM:
        return {"text": f"Observed {seen.count('Assistant:')} assistant turns."}
    if system == REFLECTION_SYSTEM:
        return {"text": "Reflection: the user keeps asking numbered questions."}
    return None


@dataclass
class Stack:
    settings: Settings
    ctx: ServiceContext
    memory: MemoryService
    nc: NatsClient
    js: Any
    generates: Any
    fake: FakeAnthropic
    events: Events
    sid: str
    steps: int = 0

    def env(self, history_len: int, **kw: Any) -> AssembleContext:
        self.steps += 1
        run = f"run-{self.sid}"
        return AssembleContext(session_id=self.sid, run_id=run, step_id=f"{run}:g{self.steps}", turn=self.steps,
                               history_len=history_len, system="You are helpful.", models=["claude-a"],
                               max_tokens=256, tools=[], offer_tools=False, **kw)

    async def seed(self, history: list[dict[str, Any]]) -> None:
        """The router's side: the session's history as stored (append-only)."""
        stored = await self.ctx.sessions.history(self.sid)
        assert history[:len(stored)] == stored
        raw, version = await self.ctx.sessions.load(self.sid)
        assert await self.ctx.sessions.commit(self.sid, version, {"n": len(history)}, history_len_before=len(stored),
                                              append=history[len(stored):])

    async def send(self, env: AssembleContext) -> None:
        await self.ctx.bus.publish_work(self.ctx.subjects.memory_assemble, env, msg_id=uuid.uuid4().hex)

    async def next_generate(self, timeout: float = 10.0) -> Generate:
        (msg,) = await self.generates.fetch(1, timeout=timeout)
        await msg.ack()
        return Generate.model_validate(codec.loads(msg.data))

    async def assemble(self, env: AssembleContext) -> Generate:
        await self.send(env)
        return await self.next_generate()

    def summary_calls(self) -> list[dict[str, Any]]:
        return [b for b in self.fake.message_requests if b.get("system") == SUMMARY_SYSTEM]

    async def memory_settled(self, deliveries: int, timeout: float = 5.0) -> None:
        """Every assemble delivered so far is acked (a bounded poll: no event for an ack)."""
        stream = stream_name(self.settings.subject_prefix, WORK_STREAM)

        async def settled() -> None:
            while True:
                info = await self.js.consumer_info(stream, f"{self.settings.subject_prefix}_memory")
                if info.delivered.consumer_seq >= deliveries and info.num_ack_pending == 0:
                    return
                await asyncio.sleep(0.02)

        await asyncio.wait_for(settled(), timeout)


@pytest.fixture
def overrides() -> dict[str, Any]:
    return {"memory_observe_every_turns": 0}


@pytest.fixture
async def stack(nats_server: ServerHandle, redis_server: ServerHandle, redis_client: Any, prefix: str,
                anthropic_server: FakeAnthropic, overrides: dict[str, Any]) -> AsyncIterator[Stack]:  # noqa: F811
    anthropic_server.responder = respond
    settings = Settings(subject_prefix=prefix, nats_url=nats_server.url, redis_url=redis_server.url,
                        llm_provider="anthropic", ack_wait_s=5.0, memory_summary_timeout_s=5.0,
                        **{"memory_observe_every_turns": 0, **overrides})
    broker = NatsBroker(settings.nats_url)
    ctx = build_context(settings, broker)
    client = anthropic.AsyncAnthropic(base_url=anthropic_server.url, api_key="test", max_retries=0)
    counts = TokenCountResponder(AnthropicTokenCount(client), ctx.subjects.llm_count_tokens, f"{prefix}_count_tokens")
    memory = MemoryService(ctx)  # its exact counts: asked of the llm service over NATS
    memory.register(broker)
    await broker.connect()
    assert broker._connection is not None
    await ensure_streams(broker._connection.jetstream(), settings)
    ctx.attach_bus()
    await broker.start()
    await ctx.consume()
    await memory.start()
    await counts.start(ctx.bus.nc)
    factory = build_model_factory(settings, {"ANTHROPIC_BASE_URL": anthropic_server.url})
    responder = SummarizeResponder(ctx, factory, RetryPolicy(max_retries=0), breaker=None, sleep=asyncio.sleep)
    if overrides.get("summaries", True):
        await responder.start(ctx.bus.nc)

    sid, nc, js, events, generates = await watch_session(ctx, ctx.subjects.llm_generate, "test_generate")
    yield Stack(settings, ctx, memory, nc, js, generates, anthropic_server, events, sid)
    await nc.close()
    await responder.stop()
    await counts.stop()
    await client.close()
    await memory.stop()
    await ctx.stop_consuming(5)
    await broker.stop()
    await factory.aclose()
    await ctx.redis.aclose()


def window_for(history: list[dict[str, Any]], share: float) -> int:
    """A context window that `history` fills to `share` (by the server's own count)."""
    tokens = count_tokens({"system": "You are helpful.", "messages": history, "tools": []})
    return int(tokens / share)


async def test_a_small_context_goes_through_unchanged(stack: Stack) -> None:
    history = conversation(turns=2)
    await stack.seed(history)
    request = await stack.assemble(stack.env(len(history)))
    assert request.messages == history and request.system == "You are helpful."
    assert request.extra_usage is None and request.tools == []
    assert request.no_refs  # the tally found no content by reference: the llm need not look
    assert stack.events.of("compaction") == [] and stack.summary_calls() == []


async def test_each_assembly_sees_the_history_as_stored_now(stack: Stack) -> None:
    """The messages decoded before are found by their stored bytes (history_memo.py): a
    growing history is decoded once, and a history that a commit trimmed and wrote again
    (another conversation at the same length) is read as it is now, not as remembered."""
    history = conversation(turns=3)
    await stack.seed(history)
    assert (await stack.assemble(stack.env(len(history)))).messages == history
    remembered = len(stack.memory.history)
    assert remembered == len(history)
    grown = history + conversation(turns=4)[len(history):]
    await stack.seed(grown)
    assert (await stack.assemble(stack.env(len(grown)))).messages == normalise_messages(grown)
    assert len(stack.memory.history) == len(set(map(codec.dumps, grown)))  # only the new ones added

    other = [history[0], {"role": "assistant", "content": [{"type": "text", "text": "another answer"}]},
             *[{"role": m["role"], "content": [{"type": "text", "text": f"rewritten {i}"}]}
               for i, m in enumerate(grown[2:])]]
    assert len(other) == len(grown)
    _, version = await stack.ctx.sessions.load(stack.sid)
    assert await stack.ctx.sessions.commit(stack.sid, version, {"n": len(other)}, history_len_before=1,
                                           append=other[1:])
    assert (await stack.assemble(stack.env(len(other)))).messages == normalise_messages(other)


async def test_compaction_goes_through_the_llm_service_and_is_reused(stack: Stack) -> None:
    history = conversation(turns=40)
    await stack.seed(history)
    window = window_for(history, 0.9)
    first = stack.env(len(history), context_window=window)
    request = await stack.assemble(first)

    (summary_call,) = stack.summary_calls()
    assert "answer 0 " in str(summary_call["messages"]) and summary_call["stream"] is True
    (event,) = await stack.events.wait_for("compaction")
    assert event["tokens_before"] > event["tokens_after"] and event["method"] == "summary"
    assert event["tokens_after"] == count_tokens({"system": request.system, "messages": request.messages,
                                                  "tools": []}), "tokens_after is the request's exact count"
    assert event["tokens_after"] < 0.8 * window
    assert_valid_request(request.messages)
    head = request.messages[0]["content"]
    assert head[0] == history[0]["content"][0] and "answer 0 was given" in head[1]["text"]
    assert request.messages[-4:] == history[-4:]

    # The summary's cost rides on this step's request, exactly as the model reported it.
    recorded = await stack.ctx.steps.get(keys.generation_step(stack.sid, f"{first.step_id}:compact.0"))
    assert recorded is not None
    assert request.extra_usage == Usage.model_validate(recorded["usage"]) and request.extra_usage.output_tokens > 0
    stored = CompactionRecord.model_validate_json(await stack.ctx.redis.get(keys.memory(stack.sid, "compaction")))
    assert stored.step_id == first.step_id and stored.covers >= 2

    # The same step delivered again: no second summary, and its event is the same one (a
    # live subscriber may see it republished; the transcript holds it once).
    await stack.send(first)
    await stack.memory_settled(deliveries=2)
    assert len(stack.summary_calls()) == 1
    assert {e["seq"] for e in stack.events.of("compaction")} == {event["seq"]}
    assert [e["kind"] for e in await stack.ctx.events.read(stack.sid)] == ["compaction"]

    # The next generation reuses the stored summary (and owes nothing more).
    longer = history + [{"role": "assistant", "content": [{"type": "text", "text": "fine"}]},
                        {"role": "user", "content": [{"type": "text", "text": "and now?"}]}]
    await stack.seed(longer)
    second = await stack.assemble(stack.env(len(longer), context_window=window))
    assert len(stack.summary_calls()) == 1
    assert second.messages[0] == request.messages[0] and second.messages[-2:] == longer[-2:]
    assert second.extra_usage is None


@pytest.mark.parametrize("overrides", [{"summaries": False, "memory_observe_every_turns": 0}])
async def test_without_a_summary_the_oldest_messages_are_dropped_from_the_request(stack: Stack) -> None:
    history = conversation(turns=40)
    await stack.seed(history)
    window = window_for(history, 0.9)
    request = await stack.assemble(stack.env(len(history), context_window=window))
    (event,) = await stack.events.wait_for("compaction")
    assert event["method"] == "drop" and event["tokens_after"] < 0.8 * window
    assert "earlier messages were left out" in request.messages[0]["content"][-1]["text"]
    assert_valid_request(request.messages)
    assert await stack.ctx.redis.get(keys.memory(stack.sid, "compaction")) is None
    assert await stack.ctx.sessions.history(stack.sid) == history, "the history is never wiped"


async def test_the_pressure_note_is_ephemeral(stack: Stack) -> None:
    history = conversation(turns=10)
    await stack.seed(history)
    request = await stack.assemble(stack.env(len(history), context_window=window_for(history, 0.75)))
    assert request.system is not None and request.system.startswith("You are helpful.")
    assert "Context is at 7" in request.system and "% capacity — prefer concise responses" in request.system
    assert stack.events.of("compaction") == []
    assert await stack.ctx.sessions.history(stack.sid) == history


@pytest.mark.parametrize("overrides", [{"memory_observe_every_turns": 2, "memory_reflect_every_observations": 2}])
async def test_observations_and_reflections_are_written_in_the_background(stack: Stack) -> None:
    history = conversation(turns=2)  # 2 model turns: the first observation is due
    await stack.seed(history)
    await stack.assemble(stack.env(len(history), actor="planner"))
    (observation,) = await stack.events.wait_for("memory.observation")
    assert observation["observation"] == "Observed 2 assistant turns."
    assert (observation["from_message"], observation["to_message"], observation["actor"]) == (0, 5, "planner")

    longer = conversation(turns=4)
    await stack.seed(longer)
    second = await stack.assemble(stack.env(len(longer), actor="planner"))
    assert second.extra_usage is not None and second.extra_usage.output_tokens > 0, "the observation's cost"
    await stack.events.wait_for("memory.observation", count=2)
    (reflection,) = await stack.events.wait_for("memory.reflection")
    assert reflection["observations"] == 2 and reflection["reflection"].startswith("Reflection:")

    third = await stack.assemble(stack.env(len(longer), actor="planner"))
    assert third.system is not None and "<memory>" in third.system
    assert "Reflection: the user keeps asking" in third.system and "Observed 2 assistant turns." in third.system
    # With the prompt cache the memory rides after its last breakpoint, with the step's
    # notes: an observation made mid-run leaves the cached system prompt as it was.
    assert third.prompt_cache == "auto" and third.stable_system is not None
    assert "<memory>" not in third.stable_system and any("<memory>" in note for note in third.notes)
    assert third.extra_usage is not None, "the second observation and the reflection"
    spent = [await stack.ctx.steps.get(keys.generation_step(stack.sid, f"{stack.sid}:{what}")) for what in ("observe:9", "reflect:2")]
    total = sum((Usage.model_validate(r["usage"]) for r in spent if r), Usage())
    assert third.extra_usage == total

    # Another session of the same actor starts with what the actor learned.
    other = Stack(stack.settings, stack.ctx, stack.memory, stack.nc, stack.js, stack.generates, stack.fake,
                  Events(), f"s-{uuid.uuid4().hex[:8]}")
    await other.seed(conversation(turns=0))
    fresh = await other.assemble(other.env(1, actor="planner"))
    assert fresh.system is not None and "From earlier sessions:" in fresh.system
    await stack.memory.observer.idle()


async def test_the_summarize_subject_replays_recorded_answers_and_never_records_failures(stack: Stack) -> None:
    from loopwire.shared.contract.envelopes import GenerationResult
    from loopwire.shared.contract.subjects import Subjects

    def request(step: str) -> bytes:
        return codec.dumps(Generate(session_id=stack.sid, run_id="r", step_id=step, models=["claude-a"],
                                    system=SUMMARY_SYSTEM, messages=[{"role": "user", "content": "hi"}],
                                    max_tokens=50))

    subject = Subjects(stack.settings.subject_prefix).llm_summarize
    first = GenerationResult.model_validate_json((await stack.nc.request(subject, request("r:g1:compact.0"), 5)).data)
    again = GenerationResult.model_validate_json((await stack.nc.request(subject, request("r:g1:compact.0"), 5)).data)
    assert first.ok and first == again and len(stack.summary_calls()) == 1

    stack.fake.fail_next(400, n=1)
    failed = GenerationResult.model_validate_json((await stack.nc.request(subject, request("r:g2:compact.0"), 5)).data)
    assert not failed.ok and failed.error is not None and failed.error.code == "bad_request"
    assert await stack.ctx.steps.get(keys.generation_step(stack.sid, "r:g2:compact.0")) is None
    retried = GenerationResult.model_validate_json((await stack.nc.request(subject, request("r:g2:compact.0"), 5)).data)
    assert retried.ok


async def test_a_malformed_envelope_is_dropped_and_the_next_one_served(stack: Stack) -> None:
    await stack.ctx.bus.publish_work(stack.ctx.subjects.memory_assemble, {"kind": "memory.assemble"}, msg_id="bad")
    history = conversation(turns=1)
    await stack.seed(history)
    request = await stack.assemble(stack.env(len(history)))
    assert request.messages == history
    await stack.memory_settled(deliveries=2)


@pytest.mark.parametrize("overrides", [{"memory_observe_every_turns": 2, "memory_reflect_every_observations": 1}])
async def test_observations_and_reflections_ask_the_memory_model(stack: Stack) -> None:
    """The run's memory model (StartRun `model.memory` / LOOPWIRE_MEMORY_MODEL, resolved by
    the router) writes the observations and reflections; their usage travels priced as it."""
    history = conversation(turns=2)
    await stack.seed(history)
    await stack.assemble(stack.env(len(history), memory_model="claude-memory-1"))
    await stack.events.wait_for("memory.observation")
    await stack.events.wait_for("memory.reflection")
    await stack.memory.observer.idle()
    background = [b for b in stack.fake.message_requests if b.get("system") in (OBSERVATION_SYSTEM, REFLECTION_SYSTEM)]
    assert {b["system"] for b in background} == {OBSERVATION_SYSTEM, REFLECTION_SYSTEM}
    assert {b["model"] for b in background} == {"claude-memory-1"}
    claimed = await stack.assemble(stack.env(len(history), memory_model="claude-memory-1"))
    assert claimed.extra_usage is not None and claimed.extra_model == "claude-memory-1"
    assert claimed.models == ["claude-a"], "the generation itself stays on the run's model"
