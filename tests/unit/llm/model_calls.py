"""What the llm unit tests hand a model: a request, a tool, a recorder of the sleeps between
retries, an overloaded error (tests/model_streams.py collects what a model streams)."""

from __future__ import annotations

from loopwire.llm.errors import ModelCallError
from loopwire.llm.model_call import ModelRequest
from loopwire.shared.contract.envelopes import ToolSpec

CALC = ToolSpec(name="calculator", description="Evaluate arithmetic.",
                input_schema={"type": "object", "properties": {"expression": {"type": "string"}}})


def req(text: str = "hello", tools: list[ToolSpec] | None = None, model: str = "m1") -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": text}], max_tokens=100,
                        tools=tools or [])


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def overloaded() -> ModelCallError:
    return ModelCallError("model_overloaded", "Overloaded", True, status=529)
