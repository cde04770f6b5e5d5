"""The real Messages API's checks of a history, as the fake makes them
(loopwire/testing/message_rules.py)."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.testing.message_rules import history_problem

pytestmark = pytest.mark.unit


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "add", "input": {}}


def result(tid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": "3"}


def test_a_well_formed_history_passes() -> None:
    history = [user(text("add")), assistant(text("Adding."), use("t1"), use("t2")),
               user(result("t2"), result("t1"), text("and a note after the results")),
               assistant(text("3 and 3.")), {"role": "user", "content": "thanks"}]
    assert history_problem(history) is None
    assert history_problem([*history, {"role": "assistant", "content": ""}]) is None, "a final prefill may be empty"


def test_a_tool_use_without_its_result_in_the_next_message() -> None:
    problem = history_problem([user(text("add")), assistant(use("t1"), use("t2")), user(result("t1"))])
    assert problem is not None and problem.startswith("messages.1: `tool_use` ids were found without") and "t2" in problem
    problem = history_problem([user(text("add")), assistant(use("t1")), user(text("go on")), user(result("t1"))])
    assert problem is not None and problem.startswith("messages.1:"), "the result must be in the very next message"


def test_a_tool_result_without_its_tool_use_before_it() -> None:
    problem = history_problem([user(text("add")), assistant(text("no tools")), user(result("t9"))])
    assert problem is not None and problem.startswith("messages.2.content.0: unexpected `tool_use_id`")


def test_results_come_first_in_their_message() -> None:
    problem = history_problem([user(text("add")), assistant(use("t1")), user(text("first"), result("t1"))])
    assert problem is not None and "at the beginning of this message" in problem


def test_empty_content_is_refused() -> None:
    assert history_problem([user()]) is not None
    assert history_problem([{"role": "user", "content": ""}]) is not None
    problem = history_problem([user(text("hi")), assistant(), user(text("again"))])
    assert problem is not None and problem.startswith("messages.1: all messages must have non-empty content")
    assert history_problem([user(text(""))]) == "messages.0.content.0: text content blocks must be non-empty"
