"""The token ledger and budgets: usage counted once, warnings, shrinking max_tokens, and
the converging last generation at exhaustion."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.router.core import budget
from loopwire.router.core.finish import OUT_OF_BUDGET_NOTE
from loopwire.shared.contract.envelopes import Usage
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def test_usage_is_taken_once_per_generation_from_its_final_cumulative_usage() -> None:
    d = Driver()
    d.start(input="add 1 and 2")
    # The final usage of a streamed call is cumulative: the ledger adds it once, as is.
    d.answer(call("t1"), usage_obj=Usage(input_tokens=100, output_tokens=30, cache_read_input_tokens=50,
                                         cache_creation_input_tokens=20))
    d.tools()
    d.answer("It is 3.", usage=(200, 10))
    ended = d.ended()
    assert ended["usage"] == {"input_tokens": 370, "output_tokens": 40, "cache_read_input_tokens": 50,
                              "cache_creation_input_tokens": 20}, "input counts the cached part too"
    assert d.state.usage.total_input() == 370 and d.state.usage.output_tokens == 40
    assert [m["usage"] for m in d.of("message")] == [
        {"input_tokens": 170, "output_tokens": 30, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 20},
        {"input_tokens": 200, "output_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}]


def test_a_warning_is_emitted_once_per_limit_near_it() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 100_000})
    d.answer(call("t1"), usage=(40_000, 100))
    assert d.of("budget.warning") == [], "40% is below the 80% threshold"
    d.tools()
    d.answer(call("t2", inp={"a": 2, "b": 2}), usage=(41_000, 100))
    (warning,) = d.of("budget.warning")
    assert warning == {"limit": "max_total_tokens", "used": 81_200, "max": 100_000, "pct": 0.812}
    d.tools()
    d.answer("4", usage=(5_000, 10))
    assert len(d.of("budget.warning")) == 1, "once per limit and run"


def test_max_tokens_shrinks_to_what_the_budget_has_left() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 2_000})
    assert d.work()["max_tokens"] == 1000, "nothing used yet: the run's own max_tokens"
    d.answer(call("t1"), usage=(600, 100))
    d.tools()
    # 2000 - 700 used - 700 the next call re-reads at least = 600 left for the answer
    assert d.work()["max_tokens"] == 600


def test_exhaustion_converges_with_one_tool_less_generation_then_ends_with_its_answer() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_000})
    d.answer("Let me add.", call("t1"), usage=(450, 50))
    assert d.work()["kind"] == "tools.execute", "the tools already asked for still run"
    d.tools()
    last = d.work()
    # The agentic profile offers the finish tool: the converging generation offers ONLY it.
    assert last["offer_tools"] is True and last["tools"] == []
    assert [t["name"] for t in last["extra_tools"]] == ["finish_agentic_task"]
    assert OUT_OF_BUDGET_NOTE in last["ephemeral_notes"]
    assert last["max_tokens"] <= budget.FINAL_ANSWER_MAX_TOKENS
    assert d.run.limits.converging == "budget_exhausted"
    d.answer("Best answer: 3.", usage=(520, 8))
    ended = d.ended()
    assert ended["status"] == "budget_exhausted" and ended["final_text"] == "Best answer: 3."
    assert ended["reason"] == "max_total_tokens"
    # The technical summary: the best answer, then what the run executed.
    assert ended["conclusion"]["summary"] == ("Out of budget. Best answer: 3. "
                                              "Executed 1 tool call(s) over 2 turn(s): add x1 (1 ok).")
    assert ended["conclusion"]["executed"] == [{"tool": "add", "calls": 1, "ok": 1, "error": 0}]
    assert ended["conclusion"]["classification"] == {"primary": "incomplete", "terminal": "budget_exhausted"}
    assert d.state.status == "idle"


def test_exhaustion_without_the_finish_tool_converges_with_no_tools_at_all() -> None:
    d = Driver()
    d.start(input="add 1 and 2", profile="turn_by_turn", limits={"max_total_tokens": 50})
    last = d.work()
    assert last["offer_tools"] is False and last["extra_tools"] == []
    assert budget.FINAL_ANSWER_NOTE in last["ephemeral_notes"]
    d.answer("Best answer: 3.", usage=(40, 8))
    assert d.ended()["status"] == "budget_exhausted"
    assert d.ended()["conclusion"]["summary"] == "Out of budget. Best answer: 3.", "the technical summary"


def test_a_converging_answer_that_still_calls_tools_ends_the_run_with_a_valid_history() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 50})
    assert d.run.limits.converging == "budget_exhausted", "a budget below one answer converges at once"
    d.answer("Partial: about 3.", call("t9"), usage=(90, 40))
    assert d.ended()["status"] == "budget_exhausted"
    assert d.ended()["final_text"] == "Partial: about 3."
    assert d.history[-1]["content"][0]["tool_use_id"] == "t9", "the dangling tool_use got a result"


def test_cost_limit_exhausts_too() -> None:
    d = Driver()
    d.start(input="add 1 and 2", model={"primary": "claude-sonnet-4-5"}, limits={"max_cost_usd": 0.01})
    d.answer(call("t1"), usage=(3_000, 100), model="claude-sonnet-4-5")  # 0.009 + 0.0015 = 0.0105
    d.tools()
    assert d.run.limits.converging == "budget_exhausted" and d.run.limits.converge_reason == "max_cost_usd"
    assert [w["limit"] for w in d.of("budget.warning")] == ["max_cost_usd"]
    d.answer("3", usage=(10, 1), model="claude-sonnet-4-5")
    assert d.ended()["status"] == "budget_exhausted" and d.ended()["reason"] == "max_cost_usd"


@pytest.mark.parametrize("model", [
    {"primary": "my-local-model"},
    {"primary": "claude-sonnet-4-5", "fallbacks": ["claude-haiku-4-5", "my-local-model"]},
    {"primary": "claude-sonnet-4-5", "selection": "auto", "lightweight": "my-local-model"},
    {"primary": "claude-sonnet-4-5", "memory": "my-local-model"},
])
def test_a_cost_cap_over_an_unpriced_model_is_refused_at_the_start(model: dict[str, Any]) -> None:
    d = Driver()
    out = d.start(model=model, limits={"max_cost_usd": 1.0})
    assert out.state is None and not d.of("run.started", out) and not out.effects[1:]
    (error,) = d.of("error", out)
    assert error["code"] == "unpriced_model" and error["model"] == "my-local-model"
    assert "my-local-model" in error["message"]


def test_a_cost_cap_over_models_priced_by_the_operator_starts() -> None:
    from loopwire.router.core.config import CoreConfig
    from loopwire.shared.runtime.pricing import price_table
    d = Driver(CoreConfig(prices=price_table({"my-local-model": {"input": 1.0, "output": 2.0}})))
    d.start(model={"primary": "my-local-model"}, limits={"max_cost_usd": 1.0})
    assert d.of("run.started") and not d.of("error")
    unlimited = Driver()
    unlimited.start(model={"primary": "my-local-model"})  # no cap: nothing to count, the run starts
    assert unlimited.of("run.started")


def test_a_failed_converging_generation_still_ends_budget_exhausted_with_the_best_answer() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_000})
    d.answer("So far: 3.", call("t1"), usage=(450, 50))
    d.tools()
    d.fail("model_overloaded", retryable=True)
    assert d.kinds()[-2:] == ["error", "run.ended"]
    assert d.ended()["status"] == "budget_exhausted" and d.ended()["final_text"] == "So far: 3."


def test_memory_extra_usage_joins_the_ledger_once_even_on_a_failed_step() -> None:
    from loopwire.router.core import inputs as i
    from loopwire.shared.contract.envelopes import GenerationResult, StepError

    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 100_000})
    step = d.pending
    d.apply(i.GenerationInput(input_id=step, result=GenerationResult(
        session_id="s1", run_id="run1", step_id=step, ok=False, extra_usage=Usage(input_tokens=400, output_tokens=50),
        error=StepError(code="context_too_long", message="prompt is too long"))))
    assert budget.tokens_used(d.run) == 450
    step = d.pending
    d.apply(i.GenerationInput(input_id=step, result=GenerationResult(
        session_id="s1", run_id="run1", step_id=step, model="m1", stop_reason="end_turn",
        message={"role": "assistant", "content": [{"type": "text", "text": "It is 3."}]},
        usage=Usage(input_tokens=100, output_tokens=5), extra_usage=Usage(input_tokens=20, output_tokens=2))))
    assert d.ended()["usage"] == {"input_tokens": 520, "output_tokens": 57, "cache_read_input_tokens": 0,
                                  "cache_creation_input_tokens": 0}
    assert d.ended()["turns"] == 1, "memory's calls are not turns"
    assert d.of("message")[0]["usage"] == {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 0,
                                           "cache_creation_input_tokens": 0}


def test_an_answer_cut_at_a_max_tokens_the_budget_shrank_ends_budget_exhausted() -> None:
    # The case: the second generation's max_tokens is the budget's headroom, the
    # answer is cut there, and the run used more than its limit: never `completed`.
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_500})
    d.answer("Adding.", call("t1"), usage=(400, 50))
    d.tools()
    assert d.work()["max_tokens"] == 600 and d.run.budget.capped
    d.answer("The sum of 1 and 2 is, after careful", stop="max_tokens", usage=(480, 600))
    ended = d.ended()
    assert ended["status"] == "budget_exhausted" and ended["reason"] == "max_total_tokens"
    assert ended["final_text"] == "The sum of 1 and 2 is, after careful", "the best answer it has"
    assert ended["conclusion"]["classification"] == {"primary": "incomplete", "terminal": "budget_exhausted"}


def test_a_cut_answer_within_budget_still_ends_budget_exhausted_when_the_budget_shrank_it() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_500})
    d.answer(call("t1"), usage=(400, 50))
    d.tools()
    d.answer("Partial", stop="max_tokens", usage=(450, 100))  # 1000 of 1500: cut, not spent
    assert d.ended()["status"] == "budget_exhausted" and d.ended()["reason"] == "max_total_tokens"


def test_a_cut_answer_at_the_runs_own_max_tokens_is_not_the_budgets_doing() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 100_000})
    d.answer(call("t1"), usage=(400, 50))
    d.tools()
    assert d.work()["max_tokens"] == 1000 and not d.run.budget.capped
    d.answer("Partial", stop="max_tokens", usage=(450, 1000))
    assert d.ended()["status"] == "completed"


def test_an_answer_that_spends_the_budget_is_not_completed_even_when_the_model_ended_its_turn() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 1_000})
    d.answer("It is 3.", usage=(990, 20))  # one generation over the whole budget
    ended = d.ended()
    assert ended["status"] == "budget_exhausted" and ended["final_text"] == "It is 3."
    assert d.ended()["usage"] == {"input_tokens": 990, "output_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def test_a_run_within_its_budget_completes() -> None:
    d = Driver()
    d.start(input="add 1 and 2", limits={"max_total_tokens": 5_000})
    d.answer(call("t1"), usage=(400, 50))
    d.tools()
    d.answer("It is 3.", usage=(480, 10))
    assert d.ended()["status"] == "completed" and d.ended()["conclusion"] is None
