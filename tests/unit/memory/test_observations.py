"""The memory hierarchy's pure parts: triggers, prompts and the hydrated section."""

from __future__ import annotations

from typing import Any, cast

import pytest

from loopwire.memory.observations import (
    Observer,
    memory_section,
    model_turns,
    observation_request,
    reflection_request,
)
from loopwire.memory.store import ObservationState, Snapshot
from loopwire.shared.contract.envelopes import AssembleContext
from tests.memory_helpers import conversation

pytestmark = pytest.mark.unit


def test_turns_are_model_messages() -> None:
    assert model_turns(conversation(turns=7)) == 7
    assert model_turns(conversation(turns=0)) == 0


def test_the_observer_reads_the_turns_and_what_it_noted_before() -> None:
    body = observation_request(conversation(turns=2), [{"text": "The user is called Ada."}])[0]["content"][0]["text"]
    assert body.startswith("<earlier-observations>\nThe user is called Ada.")
    assert "User: My secret code is ALPHA-7." in body and "Assistant: answer 1" in body
    huge = observation_request(conversation(turns=400, words=100), [])[0]["content"][0]["text"]
    assert len(huge) < 61_000 and "Assistant: answer 399" in huge, "the newest turns are kept"
    listed = reflection_request([{"text": "a"}, {"text": "b"}])[0]["content"][0]["text"]
    assert "- a\n- b" in listed


def test_the_memory_section_lists_what_is_remembered_within_its_share() -> None:
    assert memory_section(Snapshot(), 1000) is None
    snap = Snapshot(observations=[{"text": f"observation {i}"} for i in range(5)],
                    reflections=[{"text": "reflection 0"}],
                    actor_observations=[{"text": "from another session", "session_id": "s2"}])
    section = memory_section(snap, 10_000)
    assert section is not None and section.startswith("<memory>\nReflections:\n- reflection 0\nObservations:")
    assert "From earlier sessions:\n- from another session" in section and section.endswith("</memory>")
    small = memory_section(snap, 60)
    assert small is not None and "observation 4" in small and "observation 0" not in small, \
        "the oldest of the largest group give way first"


class CountedState:
    """The store's side of the observer's triggers: nothing observed yet, each read counted."""

    def __init__(self) -> None:
        self.reads = 0

    async def observation_state(self, sid: str) -> ObservationState:
        self.reads += 1
        return ObservationState()


def assemble(history_len: int) -> AssembleContext:
    return AssembleContext(session_id="s1", run_id="r1", step_id=f"r1:g{history_len}", turn=1,
                           history_len=history_len, models=["m"], max_tokens=16, tools=[], offer_tools=False)


async def test_a_generation_with_too_few_turns_to_observe_starts_no_background_work() -> None:
    store = CountedState()

    async def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing to observe yet")

    observer = Observer(store, cast(Any, None), never, emit=never, every_turns=4, reflect_every=0)  # type: ignore[arg-type]
    observer.poke(assemble(2))
    assert observer._running, "the first look at a session reads what it observed so far"
    await observer.idle()
    assert store.reads == 1
    for length in (2, 3):  # fewer than 4 messages since what it observed (nothing): too few turns
        observer.poke(assemble(length))
        assert not observer._running, f"history of {length}: no task"
    assert store.reads == 1
    # enough messages that they could hold 4 model turns: a task counts them (from what the
    # assembly read: user messages only, so no model turn yet and nothing to observe)
    observer.poke(assemble(8), (0, [{"role": "user", "content": "again"}] * 8))
    assert observer._running
    await observer.idle()
    assert store.reads == 1
    observer.poke(assemble(9))
    assert not observer._running, "those 8 counted: one more message cannot hold 4 model turns"
