"""The inspector's waterfall rows (loopwire/ui/waterfall.py) from a session's events."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.ui.waterfall import ts_ms, waterfall

pytestmark = pytest.mark.unit

PRICES = {"claude-sonnet-4": {"input": 3.0, "output": 15.0}}


class Events:
    """A transcript in the making: seq and ts (milliseconds after 12:00:00) for each event."""

    def __init__(self, sid: str = "s1") -> None:
        self.sid, self.events = sid, []  # type: ignore[var-annotated]

    def add(self, at_ms: int, kind: str, run_id: str | None = "r1", **fields: Any) -> dict[str, Any]:
        seconds, ms = divmod(at_ms, 1000)
        event = {"v": 1, "session_id": self.sid, "run_id": run_id, "seq": len(self.events) + 1, "kind": kind,
                 "ts": f"2026-12-02T12:00:{seconds:02d}.{ms:03d}Z", **fields}
        self.events.append(event)
        return event


def tool_run() -> Events:
    e = Events()
    e.add(0, "run.started", profile="agentic")
    e.add(5, "user.message", turn=0, source="input", message={"role": "user", "content": "add 1+2"})
    e.add(1205, "message", turn=1, model="claude-sonnet-4-5", stop_reason="tool_use",
          usage={"input_tokens": 1000, "output_tokens": 200}, message={"role": "assistant", "content": []})
    e.add(1206, "tool.call", turn=1, tool_use_id="tu1", name="add", input={"a": 1, "b": 2})
    e.add(1256, "tool.result", turn=1, tool_use_id="tu1", name="add", is_error=False, content="3")
    e.add(1260, "compaction", tokens_before=9000, tokens_after=2000)
    e.add(2060, "message", turn=2, model="claude-sonnet-4-5", stop_reason="end_turn",
          usage={"input_tokens": 1500, "output_tokens": 50}, message={"role": "assistant", "content": []})
    e.add(2070, "run.ended", status="completed", turns=2, final_text="3")
    return e


def test_a_tool_using_run_has_a_bar_per_generation_and_per_tool_call() -> None:
    (run,) = waterfall(tool_run().events, prices=PRICES)
    assert run["run_id"] == "r1" and run["status"] == "completed" and run["ended"]
    assert run["duration_ms"] == 2070
    first, second = run["turns"]
    # turn 1 starts at the input, turn 2 at the tool's result (the compaction is a mark in it)
    assert (first["turn"], first["start_ms"], first["end_ms"], first["duration_ms"]) == (1, 5, 1205, 1200)
    assert (second["turn"], second["start_ms"], second["end_ms"], second["duration_ms"]) == (2, 1256, 2060, 804)
    assert (first["input_tokens"], first["output_tokens"]) == (1000, 200)
    assert first["cost_usd"] == pytest.approx((1000 * 3.0 + 200 * 15.0) / 1_000_000)
    (call,) = run["tools"]
    assert (call["name"], call["turn"], call["start_ms"], call["end_ms"], call["duration_ms"]) == ("add", 1, 1206, 1256, 50)
    assert call["is_error"] is False and call["recorded"] is False
    assert run["marks"] == [{"kind": "compaction", "at_ms": 1260, "seq": 6, "label": "compaction 9000 → 2000 tokens"}]


def test_a_live_generating_event_starts_its_generation_at_its_first_attempt_and_an_unpriced_model_costs_none() -> None:
    e = Events()
    e.add(0, "run.started", profile="agentic")
    e.add(10, "user.message", turn=0, source="input", message={"role": "user", "content": "hi"})
    e.add(40, "generating", turn=1, model="loopwire-scripted")
    e.add(90, "model.fallback", from_model="a", to_model="b", reason="overloaded")
    e.add(100, "generating", turn=1, model="b")
    e.add(400, "message", turn=1, model="loopwire-scripted", stop_reason="end_turn",
          usage={"input_tokens": 3, "output_tokens": 4}, message={"role": "assistant", "content": []})
    (run,) = waterfall(e.events, prices=PRICES)
    (turn,) = run["turns"]
    assert (turn["start_ms"], turn["duration_ms"], turn["cost_usd"]) == (40, 360, None), "from the first attempt"
    assert [m["kind"] for m in run["marks"]] == ["fallback"]
    assert run["status"] is None and not run["ended"] and run["duration_ms"] == 400, "a run still going"


def test_a_fallback_during_a_generation_and_a_warning_with_its_result_do_not_start_it() -> None:
    # the order of a real transcript: the llm service's model.fallback comes during the
    # generation, the router's warning with the message (the same millisecond)
    e = Events()
    e.add(0, "run.started", profile="agentic")
    e.add(1, "user.message", turn=0, source="input", message={"role": "user", "content": "hi"})
    e.add(304, "model.fallback", from_model="p", to_model="f", reason="overloaded")
    e.add(758, "warning", code="model_fallback", message="...")
    e.add(758, "message", turn=1, model="f", stop_reason="end_turn", usage={"input_tokens": 1, "output_tokens": 1},
          message={"role": "assistant", "content": []})
    (run,) = waterfall(e.events, prices=PRICES)
    (turn,) = run["turns"]
    assert (turn["start_ms"], turn["end_ms"], turn["duration_ms"]) == (1, 758, 757)
    assert [(m["kind"], m["at_ms"]) for m in run["marks"]] == [("fallback", 304)], "the switch, inside the bar"


def test_a_retracted_turn_is_asked_again_from_its_retraction() -> None:
    e = Events()
    e.add(0, "run.started", profile="agentic")
    e.add(10, "generating", turn=1, model="m")
    e.add(200, "retracted", turn=1, reason="vacuous")
    e.add(210, "generating", turn=1, model="m")
    e.add(500, "message", turn=1, model="m", stop_reason="end_turn", usage={"input_tokens": 1, "output_tokens": 1},
          message={"role": "assistant", "content": []})
    (run,) = waterfall(e.events, prices=PRICES)
    assert [(t["start_ms"], t["duration_ms"]) for t in run["turns"]] == [(210, 290)]


def test_a_call_waiting_for_approval_starts_when_it_was_decided_and_an_unanswered_one_stays_open() -> None:
    e = Events()
    e.add(0, "run.started", profile="turn_by_turn")
    e.add(300, "message", turn=1, model="m", stop_reason="tool_use", usage={"input_tokens": 1, "output_tokens": 1},
          message={"role": "assistant", "content": []})
    e.add(301, "tool.call", turn=1, tool_use_id="a", name="add", input={})
    e.add(302, "tool.call", turn=1, tool_use_id="b", name="slow_echo", input={})
    e.add(303, "approval.requested", checkpoint_id="c1")
    e.add(5000, "approval.decided", checkpoint_id="c1", decision="approve")
    e.add(5020, "tool.result", turn=1, tool_use_id="a", name="add", is_error=True, content="no", recorded=True)
    e.add(5100, "loop.detected", detection="repeated_tool_call", escalation="redirect")
    (run,) = waterfall(e.events, prices=PRICES)
    answered, waiting = run["tools"]
    assert (answered["start_ms"], answered["duration_ms"], answered["is_error"], answered["recorded"]) == \
        (5000, 20, True, True)
    assert waiting["start_ms"] == 5000 and waiting["end_ms"] is None and waiting["duration_ms"] is None
    assert run["marks"][0]["label"] == "loop repeated_tool_call → redirect"
    assert run["duration_ms"] == 5100


def test_runs_come_in_order_and_events_of_no_run_or_before_a_start_are_left_out() -> None:
    e = Events()
    e.add(0, "session.forked", run_id=None, from_session_id="src", from_seq=4)
    e.add(1, "message", run_id="r0", turn=1, model="m", stop_reason="end_turn",
          usage={"input_tokens": 1, "output_tokens": 1}, message={})
    e.add(2, "run.started", run_id="r1", profile="agentic")
    e.add(9, "run.ended", run_id="r1", status="failed", turns=0, final_text="")
    e.add(20, "run.started", run_id="r2", profile="agentic")
    e.add(25, "run.ended", run_id="r2", status="aborted", turns=0, final_text="")
    shuffled = list(reversed(e.events))
    runs = waterfall(shuffled, prices=PRICES)
    assert [(r["run_id"], r["status"], r["duration_ms"]) for r in runs] == [("r1", "failed", 7), ("r2", "aborted", 5)]


def test_ts_ms_reads_the_events_rfc3339_stamps() -> None:
    assert ts_ms("2026-12-02T12:00:01.250Z") - ts_ms("2026-12-02T12:00:00.000Z") == pytest.approx(1250)


def test_a_turns_cache_reads_and_writes_are_shown_and_priced_at_their_rates() -> None:
    e = Events()
    e.add(0, "run.started", profile="agentic")
    e.add(1000, "message", turn=1, model="claude-sonnet-4-5", stop_reason="end_turn", message={
        "role": "assistant", "content": []}, usage={"input_tokens": 1000, "output_tokens": 100,
                                                    "cache_read_input_tokens": 800, "cache_creation_input_tokens": 150})
    e.add(1010, "run.ended", status="completed", turns=1, final_text="ok")
    (run,) = waterfall(e.events, prices={"claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_read": 0.3,
                                                             "cache_write": 3.75}})
    (turn,) = run["turns"]
    assert (turn["input_tokens"], turn["cache_read_input_tokens"], turn["cache_creation_input_tokens"]) == (1000, 800, 150)
    assert turn["cost_usd"] == pytest.approx((50 * 3.0 + 800 * 0.3 + 150 * 3.75 + 100 * 15.0) / 1_000_000)


def test_a_generation_that_waited_for_the_model_limits_shows_its_wait_before_its_bar() -> None:
    live = Events()
    live.add(0, "run.started", profile="agentic")
    live.add(5, "user.message", turn=0, source="input", message={"role": "user", "content": "hi"})
    live.add(10, "model.throttled", turn=1, model="m", reason="concurrency", wait_s=0)
    live.add(900, "model.throttled", turn=1, model="m", reason="rpm", wait_s=2.5)
    live.add(3010, "generating", turn=1, model="m")
    live.add(4010, "message", turn=1, model="m", stop_reason="end_turn", usage={"input_tokens": 10, "output_tokens": 5},
             message={"role": "assistant", "content": []})
    live.add(4020, "run.ended", status="completed", turns=1, final_text="hi")
    (turn,) = waterfall(live.events)[0]["turns"]
    assert (turn["start_ms"], turn["duration_ms"], turn["throttled"], turn["wait_ms"]) == (3010, 1000, True, 3000)
    stored = [e for e in live.events if e["kind"] != "generating"]  # the transcript keeps no `generating`
    (turn,) = waterfall(stored)[0]["turns"]
    assert (turn["start_ms"], turn["throttled"], turn["wait_ms"]) == (5, True, None)
    (plain,) = waterfall(tool_run().events)[0]["turns"][:1]
    assert (plain["throttled"], plain["wait_ms"]) == (False, None)
