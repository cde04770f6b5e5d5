"""A generation's events go out in order behind the model's stream (services/llm/step_events.py):
the stream never waits for Redis, events queued during a send go out together in the next
one, `sent()` is the barrier before the step's result, and a failed send stops the stream
and fails the step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopwire.llm.model_call import ModelResponse
from loopwire.llm.model_events import (
    Admitted,
    Finished,
    ModelStarted,
    ModelStream,
    ModelSwitched,
    TextDelta,
    Throttled,
)
from loopwire.llm.step_events import StepEvents
from loopwire.shared.contract.envelopes import Generate

pytestmark = pytest.mark.unit


class HeldBus:
    """A bus whose `emit_many` waits until the test lets each call through."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str | None, str, str | None, dict[str, Any]]]] = []
        self.done: list[list[str]] = []
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def emit_many(self, session_id: str, events: list[Any]) -> list[dict[str, Any]]:
        self.calls.append(list(events))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.done.append([kind for _, kind, _, _ in events])
        return []


def env() -> Generate:
    return Generate(session_id="s1", run_id="run1", step_id="run1:1:g", turn=1, models=["m1"],
                    messages=[{"role": "user", "content": "hi"}], max_tokens=100)


def finished() -> Finished:
    return Finished(ModelResponse(message={"role": "assistant", "content": [{"type": "text", "text": "ab"}]},
                                  stop_reason="end_turn", model="m1"))


async def stream(*events: Any) -> ModelStream:
    for event in events:
        await asyncio.sleep(0)  # a real model's stream yields to the loop between events
        yield event


def kinds(calls: list[list[Any]]) -> list[list[str]]:
    return [[kind for _, kind, _, _ in call] for call in calls]


async def test_the_stream_does_not_wait_for_its_events_and_sent_is_the_barrier() -> None:
    bus = HeldBus()
    shown = StepEvents(bus, env(), attempt=1)  # type: ignore[arg-type]
    outcome = await asyncio.wait_for(
        shown.follow(stream(ModelStarted("m1"), TextDelta("a"), TextDelta("b"), finished())), timeout=2)
    assert outcome.response.model == "m1" and shown.streamed
    # The first send is held: what came meanwhile waits for it, to go out in one call.
    assert kinds(bus.calls) == [["generating"]] and bus.done == []
    assert not shown.unsent_kept  # only events of the moment
    barrier = asyncio.create_task(shown.sent())
    await asyncio.sleep(0.01)
    assert not barrier.done()
    bus.gate.set()
    await asyncio.wait_for(barrier, timeout=2)
    assert bus.done == [["generating"], ["text.delta", "text.delta"]]
    assert [fields for call in bus.calls for _, _, _, fields in call] == [
        {"turn": 1, "model": "m1"}, {"turn": 1, "text": "a"}, {"turn": 1, "text": "b"}]


async def test_a_kept_event_not_yet_out_is_known() -> None:
    bus = HeldBus()
    shown = StepEvents(bus, env(), attempt=1)  # type: ignore[arg-type]
    await shown.follow(stream(ModelStarted("m1"), ModelSwitched("m1", "m2", "overloaded"), ModelStarted("m2"),
                              finished()))
    assert shown.unsent_kept  # model.fallback is kept by the transcript: the record waits for it
    bus.gate.set()
    await shown.sent()
    assert not shown.unsent_kept
    assert [kind for call in bus.done for kind in call] == ["generating", "model.fallback", "generating"]
    (_, _, key, fields), = [e for call in bus.calls for e in call if e[1] == "model.fallback"]
    assert key is not None and fields == {"from_model": "m1", "to_model": "m2", "reason": "overloaded"}


async def test_a_failed_send_fails_the_barrier_and_stops_the_stream() -> None:
    bus = HeldBus()
    bus.fail = ConnectionError("Redis is away")
    shown = StepEvents(bus, env(), attempt=1)  # type: ignore[arg-type]
    bus.gate.set()
    with pytest.raises(ConnectionError):
        await shown.follow(stream(ModelStarted("m1"), *[TextDelta(str(i)) for i in range(50)], finished()))
    with pytest.raises(ConnectionError):
        await shown.sent()
    assert bus.done == []
    assert len(bus.calls) < 50  # the stream stopped at the first event after the failure


async def test_nothing_queued_is_sent_at_once() -> None:
    shown = StepEvents(HeldBus(), env(), attempt=1)  # type: ignore[arg-type]
    await asyncio.wait_for(shown.sent(), timeout=1)
    assert not shown.unsent_kept


async def test_a_gated_model_says_generating_when_it_is_admitted_after_its_throttles() -> None:
    bus = HeldBus()
    bus.gate.set()
    shown = StepEvents(bus, env(), attempt=2)  # type: ignore[arg-type]
    await shown.follow(stream(ModelStarted("m1", gated=True), Throttled("m1", "concurrency", 0.0),
                              Throttled("m1", "rpm", 12.5), Admitted("m1"), TextDelta("a"), Admitted("m1"),
                              finished()))
    await shown.sent()
    emitted = [(kind, key, fields) for call in bus.calls for _, kind, key, fields in call]
    assert [kind for kind, _, _ in emitted] == ["model.throttled", "model.throttled", "generating", "text.delta"]
    assert emitted[1][2] == {"turn": 1, "model": "m1", "reason": "rpm", "wait_s": 12.5}
    assert emitted[0][1] != emitted[1][1], "each throttle keyed apart (the transcript keeps both)"
    assert shown.unsent_kept is False
