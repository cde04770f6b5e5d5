"""The demo model: it finds an expression, calls the calculator, then reads its result."""

from __future__ import annotations

import pytest

from loopwire.llm.demo_model import DemoModel, find_expression
from loopwire.llm.model_call import ModelRequest
from tests.model_streams import Streamed
from tests.unit.llm.model_calls import CALC, req

pytestmark = pytest.mark.unit


# -- demo brain -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("What is 15 * 26 + 5?", "15 * 26 + 5"),
    ("Compute (2+3)*4.", "(2+3)*4"),
    ("what is 7 × 6", "7 * 6"),
    ("I have 3 apples", None),
])
def test_find_expression(text: str, expected: str | None) -> None:
    assert find_expression(text) == expected


async def test_demo_brain_calls_calculator_then_reads_the_result() -> None:
    demo = DemoModel()
    sink = Streamed()
    first = await sink.run(demo, req("What is 15 * 26 + 5? Use the calculator.", [CALC]))
    assert first.stop_reason == "tool_use"
    (call,) = first.tool_uses()
    assert call["name"] == "calculator" and call["input"] == {"expression": "15 * 26 + 5"}
    assert "".join(sink.pieces) == first.text()
    again = await demo.generate(req("What is 15 * 26 + 5? Use the calculator.", [CALC]))
    assert again.tool_uses()[0]["id"] == call["id"], "ids are deterministic (replicas, redeliveries)"

    history = [
        {"role": "user", "content": "What is 15 * 26 + 5?"},
        first.message,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "395"}]},
    ]
    final = await sink.run(demo, ModelRequest(model="m1", messages=history, max_tokens=50, tools=[CALC]))
    assert final.text() == "The result is 395." and final.stop_reason == "end_turn"

    history[-1] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                "content": [{"type": "text", "text": "division by zero"}],
                                                "is_error": True}]}
    failed = await demo.generate(ModelRequest(model="m1", messages=history, max_tokens=50, tools=[CALC]))
    assert "error" in failed.text() and "division by zero" in failed.text()


async def test_demo_brain_quotes_the_prompt_without_the_calculator() -> None:
    answer = await DemoModel().generate(req("What is 2 + 2?"))
    assert answer.tool_uses() == [] and '"What is 2 + 2?"' in answer.text()
    assert answer.model == "loopwire-demo", "the demo model names itself, not the model asked for"
