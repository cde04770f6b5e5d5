"""The demo calculator: arithmetic only, bounded, with clear errors."""

from __future__ import annotations

import time

import pytest

from loopwire.demo import tools as demo
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.tools.catalog import Catalog
from loopwire.tools.executor import Executor
from loopwire.tools.registry import default_registry

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("expression", "expected"), [
    ("1 + 2 * 3", "7"),
    ("(2 + 3) * 4 ** 2", "80"),
    ("-2 ** 2", "-4"),
    ("-(3 - 5)", "2"),
    ("+4", "4"),
    ("7 / 2", "3.5"),
    ("6 / 3", "2"),
    ("7 // 2", "3"),
    ("-7 // 2", "-4"),
    ("7 % 3", "1"),
    ("2 ** -2", "0.25"),
    ("2 ** 0.5", "1.4142135623730951"),
    ("0.1 + 0.2", "0.30000000000000004"),
    ("10 ** 100", str(10 ** 100)),
    ("  12  ", "12"),
])
def test_arithmetic(expression: str, expected: str) -> None:
    assert demo.calculator(expression) == expected


@pytest.mark.parametrize(("expression", "message"), [
    ("__import__('os')", "function calls"),
    ("__import__('os').system('true')", "function calls"),
    ("os", "name 'os'"),
    ("(1).__class__", "attribute access"),
    ("'a' * 3", "unsupported value"),
    ("True + 1", "unsupported value"),
    ("[1, 2]", "List"),
    ("1 if 1 else 2", "IfExp"),
    ("lambda: 1", "Lambda"),
    ("1 << 2", "operator LShift"),
    ("~1", "operator Invert"),
    ("1 < 2", "Compare"),
    ("1 +", "not a valid arithmetic expression"),
    ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("(-8) ** 0.5", "not a real number"),
])
def test_anything_else_is_refused_with_a_clear_error(expression: str, message: str) -> None:
    with pytest.raises(demo.CalculatorError, match="unsupported|not a|division|real") as info:
        demo.calculator(expression)
    assert message in str(info.value)


@pytest.mark.parametrize("expression", ["9 ** 9 ** 9", "2 ** 100000", "10 ** 5000", "(10 ** 1000) ** 5",
                                        "10.0 ** 400", "(10 ** 1000) * (10 ** 1000)", "1" * 600])
def test_huge_results_are_refused_quickly(expression: str) -> None:
    started = time.perf_counter()
    with pytest.raises(demo.CalculatorError, match="too large|too long"):
        demo.calculator(expression)
    assert time.perf_counter() - started < 0.5


def test_current_time_is_utc_iso() -> None:
    value = demo.current_time()
    assert value.endswith("+00:00") and "T" in value


async def test_demo_tools_through_the_executor() -> None:
    """What `make run`'s scripted model does: call `calculator` with {"expression": ...}."""
    assert default_registry.get("calculator") is not None
    executor = Executor(Catalog(default_registry), InMemoryStepStore(), None, default_timeout_s=5)
    env = ExecuteTools(session_id="s", run_id="r", step_id="r:1:t0", calls=[
        ToolCall(tool_use_id="a", name="calculator", input={"expression": "(2 + 3) * 4"}),
        ToolCall(tool_use_id="b", name="calculator", input={"expression": "__import__('os')"}),
        ToolCall(tool_use_id="c", name="calculator", input={"expr": "1"}),
        ToolCall(tool_use_id="d", name="current_time", input={}),
    ])
    a, b, c, d = await executor.execute(env)
    assert (a.content, a.is_error) == ("20", False)
    assert b.is_error and "function calls" in str(b.content)
    assert c.is_error and "expression" in str(c.content)
    assert not d.is_error and str(d.content).endswith("+00:00")
