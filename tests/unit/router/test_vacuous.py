"""Vacuous answers: what counts, the retry with a redirect, exemptions, pass-through."""

from __future__ import annotations

import pytest

from loopwire.router.core.config import CoreConfig
from loopwire.router.core.stages import asks_for_a_number, vacuous_problem
from tests.router_driver import PRICES, Driver, call, text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("answer", "prompt", "problem"), [
    ("", "hello", "empty"),
    ("   \n", "hello", "empty"),
    (".", "hello", "punctuation_only"),
    ("...?!", "what now", "punctuation_only"),
    ("0", "hello", "bare_number"),
    ("42", "tell me a story", "bare_number"),
    ("0", "how many files are there?", None),
    ("3", "what is 1 + 2?", None),
    ("1,024", "count the rows", None),
    ("12.5%", "what percentage passed?", None),
    ("Hello!", "hello", None),
    ("0 files", "hello", None),
])
def test_what_is_vacuous(answer: str, prompt: str, problem: str | None) -> None:
    assert vacuous_problem(answer, prompt) == problem


def test_numbers_answer_quantity_questions_and_arithmetic_only() -> None:
    assert asks_for_a_number("How much does it cost?")
    assert asks_for_a_number("2*3")
    assert not asks_for_a_number("hello there")
    assert not asks_for_a_number("tell me about state-of-the-art models")


def test_a_vacuous_answer_is_retracted_dropped_and_retried_with_a_note_naming_the_problem() -> None:
    d = Driver()
    d.start(input="hello")
    turn_one = d.answer(".")
    assert d.kinds(turn_one) == ["message", "retracted"]
    assert d.of("retracted", turn_one)[0]["turn"] == 1
    assert "punctuation_only" in d.of("retracted", turn_one)[0]["reason"]
    assert [m["role"] for m in d.history] == ["user"], "the vacuous turn is not stored"
    retry = d.work(turn_one)
    assert retry["step_id"] == "run1:g2" and retry["turn"] == 2
    assert "only punctuation" in retry["ephemeral_notes"][0]
    assert [c.name for c in turn_one.counts] == ["turn", "vacuous_retry"]
    d.answer("Hello! How can I help?")
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "Hello! How can I help?"
    assert d.ended()["turns"] == 2


def test_the_whole_turn_is_judged_not_its_first_block() -> None:
    d = Driver()
    d.start(input="hello")
    d.answer(text("."), text(" Hello there."))
    assert d.of("retracted") == [] and d.ended()["final_text"] == ". Hello there."


def test_thinking_is_not_an_answer() -> None:
    d = Driver()
    d.start(input="hello")
    d.answer({"type": "thinking", "thinking": "The user greets me.", "signature": "x"}, text(""))
    assert d.of("retracted"), "only thinking and no text is empty"


def test_a_turn_that_called_a_tool_is_exempt() -> None:
    d = Driver()
    d.start(input="hello")
    d.answer(".", call("t1"))
    assert d.of("retracted") == [] and d.work()["kind"] == "tools.execute"


def test_out_of_retries_the_weak_answer_is_passed_through() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", vacuous_max_retries=1))
    d.start(input="hello")
    d.answer("")
    d.answer("0")
    ended = d.ended()
    assert ended["status"] == "completed" and ended["final_text"] == "0"
    assert len(d.of("retracted")) == 1
    assert d.history[-1] == {"role": "assistant", "content": [text("0")]}


def test_a_bare_number_answering_a_count_question_is_fine() -> None:
    d = Driver()
    d.start(input="how many moons does Earth have?")
    d.answer("1")
    assert d.of("retracted") == [] and d.ended()["final_text"] == "1"


def test_the_retry_respects_max_turns_by_passing_the_answer_through() -> None:
    d = Driver()
    d.start(input="hello", limits={"max_turns": 1})
    d.answer(".")
    assert d.of("retracted") == []
    assert d.ended()["status"] == "max_turns" and d.ended()["final_text"] == "."


def test_conversational_retries_a_vacuous_answer_within_its_run() -> None:
    d = Driver()
    d.start(input="hello", profile="conversational")
    assert (d.run.config.max_turns, d.run.config.compaction_at_pct) == (100, 0.8), "the profile table"
    d.answer(".")
    assert len(d.of("retracted")) == 1 and "only punctuation" in d.work()["ephemeral_notes"][0]
    d.answer("Hello! How can I help?")
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "Hello! How can I help?"


def test_conversational_continues_a_paused_turn() -> None:
    d = Driver()
    d.start(input="search the web for the news", profile="conversational")
    d.answer("Searching", stop="pause_turn")
    assert d.state.status == "running" and d.work()["kind"] == "memory.assemble"
    d.answer("Here is the news.")
    assert d.ended()["status"] == "completed" and d.ended()["turns"] == 2


def test_an_accepted_turn_restores_the_vacuous_allowance() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", vacuous_max_retries=2))
    d.start(input="hello")
    d.answer(".")
    d.answer("7")  # another vacuous answer (a repeat of the first would be a loop)
    assert d.run.limits.vacuous_retries == 2, "the allowance is used up"
    d.answer(call("t1"))  # a good turn: the model acts
    assert d.run.limits.vacuous_retries == 0
    d.tools()
    d.answer(".")
    assert len(d.of("retracted")) == 3, "retried again after the good turn"
    d.answer("Done: 3.")
    assert d.ended()["final_text"] == "Done: 3."


def test_without_an_accepted_turn_the_allowance_stays_spent() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", vacuous_max_retries=1))
    d.start(input="hello")
    d.answer(".")
    d.answer("?")  # out of retries: passed through, and a passed-through answer restores nothing
    assert d.ended()["final_text"] == "?" and len(d.of("retracted")) == 1
