"""What the llm unit tests hand a model and collect from it: a request, a tool, a collector of
streamed text, a recorder of the sleeps between retries, an overloaded error."""

from __future__ import annotations

from loopwire.llm.errors import ModelCallError
from loopwire.llm.model import ModelRequest
from loopwire.shared.contract.envelopes import ToolSpec

CALC = ToolSpec(name="calculator", description="Evaluate arithmetic.",
                input_schema={"type": "object", "properties": {"expression": {"type": "string"}}})


def req(text: str = "hello", tools: list[ToolSpec] | None = None, model: str = "m1") -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": text}], max_tokens=100,
                        tools=tools or [])


class Collect:
    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def overloaded() -> ModelCallError:
    return ModelCallError("model_overloaded", "Overloaded", True, 529)
