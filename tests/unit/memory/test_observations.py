"""The memory hierarchy's pure parts: triggers, prompts and the hydrated section."""

from __future__ import annotations

import pytest

from loopwire.memory.observations import memory_section, model_turns, observation_request, reflection_request
from loopwire.memory.store import Snapshot
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
