"""The technical summary (the strategy loop's converge fallback): a run that stops without a
conclusion of the model's own (max_turns, budget_exhausted, loop_terminated; a text answer
where a strategy asks for a conclusion) concludes with what it executed."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.config import CoreConfig
from loopwire.router.core.finish import GUIDELINE, describe
from loopwire.router.core.tool_batches import record_batch
from loopwire.shared.contract.protocol import StartRun
from loopwire.shared.contract.run_state import RunConfig, RunState
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit


def test_record_and_describe_count_calls_per_tool_with_their_outcomes() -> None:
    run = RunState(run_id="r", config=RunConfig(models=["m"], max_tokens=10), turn=3)
    record_batch(run, [{"tool_use_id": "a", "content": "1"},
                       {"tool_use_id": "b", "content": "x", "is_error": True}],
                 {"a": "add", "b": "search"})
    record_batch(run, [{"tool_use_id": "c", "content": "2"}], {"c": "add"})
    assert run.tools.executed == [{"tool": "add", "calls": 2, "ok": 2, "error": 0},
                            {"tool": "search", "calls": 1, "ok": 0, "error": 1}]
    assert describe(run) == ("Executed 3 tool call(s) over 3 turn(s): add x2 (2 ok); "
                             "search x1 (1 error).")


def loop_once(d: Driver, tid: str) -> None:
    d.answer(call(tid, "add", {"a": 1, "b": 1}))


def test_a_loop_terminated_run_after_tools_concludes_with_what_it_executed() -> None:
    d = Driver()
    d.start(input="add 1 and 1")
    for n in (1, 2):
        loop_once(d, f"t{n}")
        d.tools(content="2")
    loop_once(d, "t3")  # redirect
    loop_once(d, "t4")  # no fallback, temperature unset: raised from the default, or terminate
    while d.run.limits.converging is None:
        loop_once(d, f"t{len(d.of('loop.detected')) + 4}")
    d.answer("")  # the converging generation says nothing
    ended = d.ended()
    assert ended["status"] == "loop_terminated"
    conclusion = ended["conclusion"]
    assert conclusion["classification"] == {"primary": "incomplete", "terminal": "loop_terminated"}
    assert conclusion["executed"] == [{"tool": "add", "calls": 2, "ok": 2, "error": 0}]
    assert conclusion["summary"].startswith("Stopped: the run was going round in a loop.")
    assert "add x2 (2 ok)" in conclusion["summary"]
    assert ended["final_text"] == conclusion["summary"], "no answer of its own: the summary is the answer"


def test_budget_exhausted_without_the_finish_tool_still_summarises_the_tools() -> None:
    d = Driver()
    d.start(input="add 1 and 2", profile="turn_by_turn", limits={"max_total_tokens": 1_000})
    d.answer(call("t1"), usage=(450, 50))
    (asked,) = d.of("approval.requested")
    d.decision(asked["checkpoint_id"], "approve")
    d.tools(content="boom", is_error=True)
    assert d.run.limits.converging == "budget_exhausted"
    d.answer("Could not add.", usage=(500, 5))
    conclusion = d.ended()["conclusion"]
    assert conclusion["executed"] == [{"tool": "add", "calls": 1, "ok": 0, "error": 1}]
    assert conclusion["summary"] == ("Out of budget. Could not add. Executed 1 tool call(s) over 2 turn(s): "
                                     "add x1 (1 error).")


def test_a_failed_converging_generation_concludes_with_the_summary() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_000})
    d.answer(call("t1"), usage=(450, 50))
    d.tools()
    d.fail("model_overloaded", retryable=True)
    ended = d.ended()
    assert ended["status"] == "budget_exhausted"
    assert ended["conclusion"]["executed"] == [{"tool": "add", "calls": 1, "ok": 1, "error": 0}]
    assert ended["final_text"] == ended["conclusion"]["summary"]


def test_a_run_the_model_finished_gets_no_technical_summary() -> None:
    d = Driver()
    d.start(input="add 1 and 2")
    d.answer(call("t1"))
    d.tools()
    d.answer("It is 3.")
    assert d.ended()["status"] == "completed" and d.ended()["conclusion"] is None


def test_every_stopped_run_concludes_with_the_summary_tools_or_not() -> None:
    d = Driver()
    d.start(input="hi", profile="conversational", limits={"max_total_tokens": 10})
    d.answer("Hello.", usage=(20, 5))
    ended = d.ended()
    assert ended["status"] == "budget_exhausted" and ended["final_text"] == "Hello."
    assert ended["conclusion"]["summary"] == "Out of budget. Hello."
    assert ended["conclusion"]["executed"] == [] and ended["conclusion"]["classification"]["primary"] == "incomplete"


@pytest.mark.parametrize(("reason", "opener"), [
    ("max_turns", "Stopped at the run's turn limit (max_turns)."),
    ("max_inner_iterations", "Stopped at the limit of tool rounds in one outer iteration (max_inner_iterations)."),
])
def test_a_run_at_a_turn_limit_concludes_with_the_summary(reason: str, opener: str) -> None:
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", max_inner_iterations=1))
    d.start(input="add 1 and 2", limits={"max_turns": 1 if reason == "max_turns" else 5})
    d.answer("Adding.", call("t1"))
    d.tools()
    ended = d.ended()
    assert (ended["status"], ended["reason"]) == ("max_turns", reason)
    assert ended["conclusion"]["summary"] == f"{opener} Adding. Executed 1 tool call(s) over 1 turn(s): add x1 (1 ok)."
    assert ended["conclusion"]["classification"] == {"primary": "incomplete", "terminal": "max_turns"}
    assert ended["final_text"] == "Adding.", "the answer it has stays its final text"


STRATEGY = {"actor": "ops", "role": "You triage."}


def start_with_strategy(d: Driver, strategy: dict, **body: object) -> None:
    d.apply(i.StartInput(input_id="in:1", new_id="run1", strategy=strategy, body=StartRun.model_validate(
        {"input": "is the disk full?", "strategy": {"actor": strategy["actor"]}, **body})))


def test_a_strategy_that_asks_for_a_conclusion_gets_the_guideline_and_an_explanation() -> None:
    d = Driver()
    start_with_strategy(d, STRATEGY)
    assert d.run.config.conclusion and d.work()["system"].endswith(f"Guidelines:\n- {GUIDELINE}")
    d.answer("Checking.", call("t1"))
    d.tools()
    d.answer("The disk is 40% full.")
    ended = d.ended()
    assert ended["status"] == "completed" and ended["final_text"] == "The disk is 40% full."
    assert ended["conclusion"]["classification"] == {"primary": "task_complete", "terminal": "explanation"}
    assert ended["conclusion"]["summary"] == ("The disk is 40% full. Executed 1 tool call(s) over 2 turn(s): "
                                              "add x1 (1 ok).")


@pytest.mark.parametrize(("strategy", "body"), [
    ({**STRATEGY, "conclusion": False}, {}),  # the config does not ask
    (STRATEGY, {"tools": []}),  # no finish tool offered: nothing to ask for
    (STRATEGY, {"profile": "conversational"}),
])
def test_no_explanation_where_none_is_asked_for(strategy: dict, body: dict) -> None:
    d = Driver()
    start_with_strategy(d, strategy, **body)
    assert not d.run.config.conclusion and GUIDELINE not in (d.work()["system"] or "")
    d.answer("The disk is 40% full.")
    assert d.ended()["status"] == "completed" and d.ended()["conclusion"] is None
