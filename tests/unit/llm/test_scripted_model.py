"""The scripted model: its chunks, its steps in order, errors and callables, usage."""

from __future__ import annotations

import pytest

from loopwire.llm.demo_model import DemoModel
from loopwire.llm.errors import ModelCallError
from loopwire.llm.offline_reply import split_chunks
from loopwire.llm.scripted_model import ScriptedModel, ScriptedResponse, ScriptExhausted
from loopwire.shared.contract.envelopes import Usage
from tests.model_streams import Streamed
from tests.unit.llm.model_calls import req

pytestmark = pytest.mark.unit


# -- scripted model ---------------------------------------------------------------------------
def test_split_chunks_rejoins_exactly() -> None:
    text = "The quick  brown fox jumps over the lazy dog."
    chunks = split_chunks(text)
    assert 1 < len(chunks) <= 4
    assert "".join(chunks) == text
    assert split_chunks("") == []
    assert split_chunks("one") == ["one"]


async def test_scripted_model_plays_in_order_and_fails_on_extra_call() -> None:
    model = ScriptedModel([
        {"text": "first answer with a few words"},
        ScriptedResponse(text="calling", tool_uses=[{"name": "calculator", "input": {"expression": "1+1"}}]),
    ])
    sink = Streamed()
    first = await sink.run(model, req("a"))
    assert first.text() == "first answer with a few words"
    assert "".join(sink.pieces) == first.text() and len(sink.pieces) > 1
    assert first.stop_reason == "end_turn"
    second = await model.generate(req("b"))
    assert second.stop_reason == "tool_use"
    (tool_use,) = second.tool_uses()
    assert tool_use["name"] == "calculator" and tool_use["input"] == {"expression": "1+1"}
    assert tool_use["id"].startswith("toolu_")
    model.assert_done()
    with pytest.raises(ScriptExhausted, match="unexpected model call #3"):
        await model.generate(req("c"))
    assert [r.messages[0]["content"] for r in model.requests] == ["a", "b", "c"]


async def test_scripted_model_errors_callables_and_unused_steps() -> None:
    overloaded = ModelCallError("model_overloaded", "Overloaded", True, status=529)
    model = ScriptedModel([overloaded, lambda r: {"text": f"echo {r.messages[-1]['content']}"}, {"text": "x"}])
    with pytest.raises(ModelCallError) as info:
        await model.generate(req())
    assert info.value is overloaded and info.value.model == "m1"
    assert (await model.generate(req("ping"))).text() == "echo ping"
    with pytest.raises(AssertionError, match="1 scripted response"):
        model.assert_done()


async def test_scripted_usage_override_and_word_count() -> None:
    model = ScriptedModel([{"text": "a b c", "usage": {"input_tokens": 7, "output_tokens": 3}}, {"text": "a b c"}])
    assert (await model.generate(req())).usage == Usage(input_tokens=7, output_tokens=3)
    short = (await model.generate(req("one two"))).usage
    longer = (await DemoModel().generate(req("one two three four five six seven eight"))).usage
    assert short.output_tokens == 3 and short.input_tokens == 2
    assert longer.input_tokens == 8
