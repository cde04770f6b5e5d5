"""CommitmentGate: a reply that announces an action without taking it gets a nudge."""

from __future__ import annotations

import pytest

from loopwire.router.core.stages import announced_action
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("reply", "announces"), [
    ("Let me check the weather for you.", True),
    ("Sure! I'll analyze the logs now.", True),
    ("I found the file. Now I will run the tests:", True),
    ("OK, let's search the docs.", True),
    ("The sum is 42. Let me know if you need anything else.", False),
    ("Let me explain: the cache is cold.", False),
    ("I'll check the logs next time. The answer is 7.", False),
    ("It is sunny in Paris.", False),
    ("Understood, I will not add.", False),
])
def test_announcements_are_found_in_the_last_sentence(reply: str, announces: bool) -> None:
    assert (announced_action(reply) is not None) is announces


def test_an_announcement_without_a_call_gets_a_nudge_then_the_model_acts() -> None:
    d = Driver()
    d.start(input="what is the weather in Paris?")
    nudged = d.answer("Let me check the weather.")
    assert d.of("run.ended") == []
    assert [m["role"] for m in d.history] == ["user", "assistant", "user"]
    assert "without calling a tool" in d.history[-1]["content"][0]["text"]
    assert "Let me check the weather." in d.history[-1]["content"][0]["text"]
    assert [c.name for c in nudged.counts] == ["turn", "commitment_nudge"]
    d.answer(call("t1", "weather", {"city": "Paris"}))
    assert d.work()["kind"] == "tools.execute"


def test_nudges_are_bounded_per_run() -> None:
    d = Driver()
    d.start(input="what is the weather in Paris?")
    d.answer("Let me check the weather.")
    d.answer("I'll look it up now.")
    d.answer("I will fetch the forecast.")
    assert d.ended()["status"] == "completed", "past commitment_max_nudges (2) the reply ends the run"
    assert d.ended()["final_text"] == "Let me check the weather.\n\nI'll look it up now.\n\nI will fetch the forecast.", \
        "the nudged replies are answers too (answers.py)"


def test_no_nudge_without_tools_offered() -> None:
    d = Driver()
    d.start(input="what is the weather in Paris?", tools=[])
    d.answer("Let me check the weather.")
    assert d.ended()["status"] == "completed"
    d = Driver()
    d.start(input="hi", profile="conversational")
    d.answer("Let me check the weather.")
    assert d.ended()["status"] == "completed"
