"""The error policy: continue, retry with reduced context, switch model, terminate."""

from __future__ import annotations

import pytest

from loopwire.router.core.config import CoreConfig
from loopwire.router.core.error_policy import classify_generation_failure
from loopwire.shared.contract.envelopes import StepError
from loopwire.shared.contract.run_state import RunConfig, RunState
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def run(models: list[str] | None = None, **state: object) -> RunState:
    return RunState(run_id="r", config=RunConfig(models=models or ["m1"], max_tokens=100), **state)


@pytest.mark.parametrize(("code", "models", "state", "action"), [
    ("context_too_long", None, {}, "retry_reduced_context"),
    ("context_too_long", None, {"limits": {"context_retries": 1}}, "terminate"),
    ("not_found", ["m1", "m2"], {}, "switch_model"),
    ("not_found", ["m1"], {}, "terminate"),
    ("not_found", ["m1", "m2"], {"limits": {"model_offset": 1}}, "terminate"),
    ("cancelled", None, {}, "continue"),
    ("cancelled", None, {"limits": {"step_retries": 2}}, "terminate"),
    ("model_overloaded", ["m1", "m2"], {}, "terminate"),
    ("circuit_open", ["m1", "m2"], {}, "terminate"),
    ("bad_request", None, {}, "terminate"),
    ("auth", None, {}, "terminate"),
    ("context_too_long", None, {"limits": {"converging": "budget_exhausted"}}, "terminate"),
])
def test_classification(code: str, models: list[str] | None, state: dict[str, object], action: str) -> None:
    verdict = classify_generation_failure(StepError(code=code, message="m"), run(models, **state), CoreConfig())
    assert verdict.action == action and verdict.code == code


def test_context_too_long_retries_once_with_reduced_context_then_fails() -> None:
    d = Driver()
    d.start(input="summarise the repo")
    assert d.work()["reduce_context"] is False
    retried = d.fail("context_too_long", "prompt is too long: 210000 tokens > 200000 maximum")
    assert d.of("error", retried) == [{"code": "context_too_long", "message":
                                       "prompt is too long: 210000 tokens > 200000 maximum",
                                       "action": "retry_reduced_context"}]
    assert d.of("steering", retried) == [{"source": "retry_reduced_context", "turn": 0, "reason": "context_too_long"}]
    env = d.work(retried)
    assert env["reduce_context"] is True and env["step_id"] == "run1:g2", "a new step id: not deduplicated"
    d.fail("context_too_long", "still too long")
    assert d.ended()["status"] == "failed" and d.ended()["reason"] == "context_too_long"
    assert d.of("error")[-1]["action"] == "terminate"


def test_an_unknown_model_switches_to_the_next_one() -> None:
    d = Driver()
    d.start(input="hello", model={"primary": "m-typo", "fallbacks": ["m2"]})
    d.fail("not_found", "model: m-typo")
    assert d.of("model.fallback") == [{"from_model": "m-typo", "to_model": "m2", "reason": "not_found"}]
    assert d.of("steering") == [{"source": "model_switch", "turn": 0, "reason": "not_found", "to_model": "m2"}]
    assert d.work()["models"] == ["m2"]
    d.answer("Hello!", model="m2")
    assert d.ended()["status"] == "completed"


def test_exhausted_retries_and_fallbacks_fail_the_run_clearly() -> None:
    d = Driver()
    d.start(input="hello", model={"fallbacks": ["m2"]})
    d.fail("model_overloaded", "529 from every model", retryable=True)
    assert d.kinds()[-2:] == ["error", "run.ended"]
    assert d.ended()["status"] == "failed" and d.of("error")[-1]["code"] == "model_overloaded"


def test_a_cancelled_generation_that_is_still_pending_is_requested_again() -> None:
    d = Driver()
    d.start(input="hello")
    d.fail("cancelled", "the generation was cancelled (steer or abort)")
    assert d.work()["step_id"] == "run1:g2" and d.of("run.ended") == []


def test_failed_tool_calls_are_results_and_the_loop_continues() -> None:
    d = Driver()
    d.start(input="add 1 and 2")
    d.answer(call("t1"))
    d.tools("tool add timed out after 30s", is_error=True)
    assert d.history[-1]["content"][0]["is_error"] is True
    assert d.work()["kind"] == "memory.assemble" and d.of("error") == []
