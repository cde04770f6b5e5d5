"""The run's answers make its final text (answers.py), and run.ended counts the session's
messages, through the router's pure core."""

from __future__ import annotations

import pytest

from loopwire.router.core import answers
from loopwire.router.core.decide import CoreConfig
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit


def test_a_retracted_answer_never_counts_and_the_retry_does() -> None:
    d = Driver()
    d.start(input="hello")
    d.answer(".")
    d.answer("Hello! How can I help?")
    assert len(d.of("retracted")) == 1
    assert d.ended()["final_text"] == "Hello! How can I help?"


def test_tool_turns_and_paused_turns_are_not_answers() -> None:
    d = Driver()
    d.start(input="add 1 and 2, then tell me the weather", tools=["add"])
    d.answer("Let me add.", call("t1"))
    d.tools("3")
    d.answer("Looking up the weather", stop="pause_turn")
    d.answer("1 + 2 is 3, and it is sunny.")
    assert d.ended()["final_text"] == "1 + 2 is 3, and it is sunny."


def test_answers_of_two_outer_iterations_and_the_finish_summary_are_joined_in_order() -> None:
    d = Driver()
    d.start(input="first question", tools=["add"])
    d.message("second question")
    d.answer("Answer one.")
    assert d.of("run.ended") == [], "the follow-up was taken at the outer boundary"
    d.answer(call("f1", "finish_agentic_task", {"summary": "Answer two, concluded."}))
    ended = d.ended()
    assert ended["final_text"] == "Answer one.\n\nAnswer two, concluded."
    assert ended["conclusion"]["summary"] == "Answer two, concluded."


def test_the_plan_phase_reply_is_the_plan_not_an_answer() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="do it")
    d.answer("My plan:\n1. look\n2. fix")
    d.answer(call("p1", "update_plan", {"plan": [{"step": "look", "status": "completed"},
                                                  {"step": "fix", "status": "completed"}]}))
    d.answer("Verified: fixed.")
    assert d.ended()["final_text"] == "Verified: fixed."


def test_a_run_stopped_with_no_answer_ends_with_its_best_text() -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", default_max_tokens=1000))
    d.start(input="add forever", tools=["add"], limits={"max_turns": 1})
    d.answer("Adding first.", call("t1"))
    d.tools("3")  # the last round at the limit still runs
    ended = d.ended()
    assert (ended["status"], ended["final_text"]) == ("max_turns", "Adding first.")


def test_message_count_is_the_session_history_after_the_run() -> None:
    d = Driver()
    d.start(input="add", tools=["add"])
    d.answer(call("t1"))
    d.tools("3")
    d.answer("It is 3.")
    assert d.ended()["message_count"] == 4 == len(d.history), "request, call, result, answer"
    d.message("and 4 + 4?")
    d.answer("It is 8.")
    second = d.of("run.ended")[-1]
    assert second["message_count"] == 6 == len(d.history), "the whole session's, not the run's"
    d.message("abort this one")
    d.answer(call("t2"))
    d.abort()
    aborted = d.of("run.ended")[-1]
    assert aborted["message_count"] == 9 == len(d.history), "with the cancelled call's result"


def test_the_answers_read_from_the_events_are_the_runs() -> None:
    """A run rebuilt from its transcript (journal_resume.py) gets the answers back."""
    d = Driver()
    d.start(profile="agentic_planned", input="check the disk", tools=["df"])
    d.answer("1. look at the disk")  # the plan, not an answer
    d.answer(".")  # vacuous: retracted
    d.answer("Let me look at it.")
    d.answer(call("t1", "df", {}))
    d.tools("93%")
    d.answer("The disk is 93% full.")
    d.answer("Checked: 93%.")  # the step left open: sent on to verify
    d.answer("Verified: 93%.")
    events = [{"kind": e.kind, **e.fields} for e in d.events]
    retracted = {e["turn"] for e in events if e["kind"] == "retracted"}
    rebuilt = answers.from_events("agentic_planned", events, retracted)
    assert answers.SEPARATOR.join(rebuilt) == d.ended()["final_text"]
    assert rebuilt == ["Let me look at it.", "The disk is 93% full.", "Checked: 93%.", "Verified: 93%."]
