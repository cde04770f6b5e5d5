"""The provider interface of the llm service: one request, one response, one ABC.

Every backend (the Anthropic API, the scripted test model, the offline demo and bench
models) is a `Model`, and so is everything that adds behaviour to a model by wrapping it
(wrapper.py): the traces and latency metrics (instrumented_model.py), the fleet-wide
circuit breaker (breaker.py) and the fallback chain over several models (fallback.py).
Messages and content blocks stay in the Anthropic Messages format end to end, as plain
dicts: that is the format of the session history, so no conversion happens on the hot
path.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopwire.shared.contract.envelopes import ToolSpec, Usage

if TYPE_CHECKING:
    from .errors import ModelCallError

TextCallback = Callable[[str], Awaitable[None]]
"""Called with each piece of assistant text as it arrives (in order)."""


@dataclass
class ModelRequest:
    """One model call, independent of the provider."""

    model: str
    """Model id, e.g. `claude-sonnet-4-5`."""
    messages: list[dict[str, Any]]
    """The conversation in the Anthropic Messages format (alternating user/assistant)."""
    max_tokens: int
    system: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    """Tools offered to the model; empty means none (the provider omits the field)."""
    temperature: float | None = None
    """None leaves the provider's default."""

    def for_model(self, model: str) -> ModelRequest:
        """The same request aimed at another model (used by the fallback chain)."""
        return dataclasses.replace(self, model=model)

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


@dataclass
class ModelResponse:
    """The assistant message a model produced, with what it cost."""

    message: dict[str, Any]
    """`{"role": "assistant", "content": [blocks]}`."""
    stop_reason: str | None
    model: str
    """The model that answered (as reported by the provider)."""
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None

    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.message.get("content", []) if b.get("type") == "text")

    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.message.get("content", []) if b.get("type") == "tool_use"]


class Model(ABC):
    """A backend that turns a `ModelRequest` into a `ModelResponse`.

    Implementations raise `ModelCallError` (errors.py) for every failure a caller may
    act on, with `retryable` telling whether the same call may succeed later.
    """

    name: str = "model"

    @abstractmethod
    async def generate(self, request: ModelRequest, on_text: TextCallback | None = None) -> ModelResponse:
        """Run one call; stream text pieces to `on_text` while it runs."""

    def unavailable(self) -> ModelCallError | None:
        """Why this model must not be asked now, as the error its call would end with (an
        open circuit breaker, breaker.py), or None: the fallback chain skips such a model
        without calling it. By default a model is always available."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most models hold nothing
        """Release connections; the default holds none."""
