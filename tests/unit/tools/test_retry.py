"""Per-tool retries: transient failures are tried again, others are not."""

from __future__ import annotations

import pytest

from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.tools.catalog import Catalog
from loopwire.tools.executor import Executor
from loopwire.tools.registry import ToolRegistry
from loopwire.tools.retry import RetryPolicy, TransientToolError, with_retries

pytestmark = pytest.mark.unit


def envelope(name: str) -> ExecuteTools:
    return ExecuteTools(session_id="s", run_id="r", step_id="r:t1", turn=1,
                        calls=[ToolCall(tool_use_id="tu1", name=name, input={})])


def executor_with(reg: ToolRegistry) -> Executor:
    return Executor(Catalog(reg), InMemoryStepStore(), nc=None, default_timeout_s=5)


async def test_a_transient_failure_is_retried_up_to_the_tools_policy() -> None:
    reg = ToolRegistry()
    attempts = {"flaky": 0, "fragile": 0}

    @reg.tool(retries=2, retry_backoff_s=0.001)
    def flaky() -> str:
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise TransientToolError("backend busy")
        return "fine"

    @reg.tool
    def fragile() -> str:
        attempts["fragile"] += 1
        raise TransientToolError("backend busy")

    (ok,) = await executor_with(reg).execute(envelope("flaky"))
    assert (ok.content, ok.is_error, attempts["flaky"]) == ("fine", False, 3)
    (failed,) = await executor_with(reg).execute(envelope("fragile"))
    assert failed.is_error and "backend busy" in str(failed.content) and attempts["fragile"] == 1


async def test_non_transient_errors_are_not_retried() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        await with_retries(attempt, RetryPolicy(3, 0.0), (TransientToolError,))
    assert calls == 1


def test_policy_from_provider_metadata() -> None:
    assert RetryPolicy.from_metadata({"loopwire.retries": "2", "loopwire.retry_backoff_s": "0.5"}) == RetryPolicy(2, 0.5)
    assert RetryPolicy.from_metadata({}) == RetryPolicy(0, 0.2)
    assert RetryPolicy.from_metadata({"loopwire.retries": "lots"}) == RetryPolicy()
    assert RetryPolicy.from_metadata({"loopwire.retries": "99"}).retries == 10
