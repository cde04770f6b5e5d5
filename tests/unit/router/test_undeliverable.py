"""Work that will not be delivered ends its run `failed` with an `error` `undeliverable`,
and the session takes new input again (the core's side of shared/runtime/dead_letters.py and the
router's watchdog)."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def undeliverable(run_id: str | None, step_id: str | None = None, n: int = 1) -> i.UndeliverableInput:
    return i.UndeliverableInput(input_id=f"dead:{n}", run_id=run_id, step_id=step_id,
                                what="tools.execute", reason="given up after 20 deliveries")


def test_a_dead_letter_ends_its_run_failed_and_the_session_takes_a_new_start() -> None:
    d = Driver()
    d.start()
    d.answer("Adding.", call("t1"))
    assert d.state.status == "running" and d.run.awaiting == "tools"
    out = d.apply(undeliverable("run1"))
    assert d.kinds(out) == ["user.message", "error", "run.ended"]
    error = d.of("error", out)[0]
    assert error["code"] == "undeliverable" and "tools.execute could not be delivered" in error["message"]
    assert d.ended()["status"] == "failed" and d.ended()["reason"] == "undeliverable"
    assert d.ended()["final_text"] == "Adding.", "the best answer so far"
    assert [n.body for n in d.notices(out)] == [{"run_id": "run1"}], "whatever still runs is cancelled"
    # the dangling tool call is answered, so the history stays valid for the next run
    assert d.history[-1]["content"][0]["tool_use_id"] == "t1"
    assert d.state.status == "idle" and d.state.run is None
    d.start(run_id="run2", input="again")
    assert d.state.status == "running" and d.run.run_id == "run2"


def test_the_same_dead_letter_twice_and_one_of_an_ended_run_change_nothing() -> None:
    d = Driver()
    d.start()
    d.apply(undeliverable("run1"))
    again = d.apply(undeliverable("run1"))  # redelivered: its stored outbox, performed again
    assert again.state is None and again.replay and d.kinds(again)[-1] == "run.ended"
    d.start(run_id="run2")
    stale = d.apply(undeliverable("run1", n=2))
    assert stale.state is None and stale.effects == [], "run2 is not touched by run1's dead letter"
    assert d.state.status == "running"


def test_the_watchdog_ends_a_run_only_if_its_step_is_still_the_one_it_saw() -> None:
    d = Driver()
    d.start()
    seen_step = d.pending
    d.answer("Adding.", call("t1"))  # progress since the watchdog looked
    moved = d.apply(undeliverable("run1", step_id=seen_step, n=3))
    assert moved.state is None and d.state.status == "running"
    stuck = d.apply(undeliverable("run1", step_id=d.pending, n=4))
    assert d.kinds(stuck)[-1] == "run.ended" and d.state.status == "idle"


def test_a_given_up_ingress_message_is_reported_on_its_session() -> None:
    d = Driver()
    out = d.apply(undeliverable(None))
    assert out.state is None
    assert d.kinds(out) == ["error"] and d.of("error", out)[0]["code"] == "undeliverable"


def test_follow_ups_queued_before_the_dead_letter_start_the_next_run() -> None:
    d = Driver()
    d.start()
    d.message("and then?")
    d.apply(undeliverable("run1"))
    assert d.state.status == "running" and d.run.run_id == "run1.next", "accepted input is not lost"
