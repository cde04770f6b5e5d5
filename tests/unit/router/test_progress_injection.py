"""ProgressInjector: after tool results, an ephemeral reminder of the task and progress."""

from __future__ import annotations

import pytest

from loopwire.router.core.follow_ups import truncate
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def test_after_tool_results_the_next_generation_is_reminded_of_task_and_progress() -> None:
    d = Driver()
    d.start(input="Add 1 and 2, then multiply by 3.")
    assert d.work()["ephemeral_notes"] == [], "no reminder before any tool ran"
    d.answer(call("t1"))
    d.tools("3")
    (note,) = d.work()["ephemeral_notes"]
    assert note.startswith("Task: Add 1 and 2, then multiply by 3.")
    assert "1 tool call(s) over 1 turn(s)" in note and "add (ok)" in note
    d.answer(call("t2", "mul", {"a": 3, "b": 3}))
    d.tools("boom", is_error=True)
    (note,) = d.work()["ephemeral_notes"]
    assert "2 tool call(s) over 2 turn(s); tools used: add, mul" in note and "mul (error)" in note


def test_the_reminder_is_never_stored_in_the_history() -> None:
    d = Driver()
    d.start(input="Add 1 and 2.")
    d.answer(call("t1"))
    d.tools("3")
    stored = [b for m in d.history for b in m["content"] if b.get("type") == "text"]
    assert all("Task:" not in b["text"] for b in stored)
    assert d.history[-1]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "content": "3"}]


def test_the_task_is_truncated() -> None:
    d = Driver()
    d.start(input="x" * 1000 + " add 1 and 2")
    d.answer(call("t1"))
    d.tools()
    (note,) = d.work()["ephemeral_notes"]
    assert len(note.splitlines()[0]) < 320 and note.splitlines()[0].endswith("…")
    assert truncate("a  b\n c") == "a b c"


def test_profile_setting_none_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from loopwire.router.core import profiles

    monkeypatch.setitem(profiles.PROFILES, "agentic",
                        dataclasses.replace(profiles.PROFILES["agentic"], progress_injection="none"))
    d = Driver()
    d.start(input="Add 1 and 2.")
    d.answer(call("t1"))
    d.tools()
    assert d.work()["ephemeral_notes"] == []
