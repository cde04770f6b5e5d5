"""What one model call sends and gets back, whatever the provider: a `ModelRequest`, and the
`ModelResponse` that ends its stream (model.py, model_events.py).

Messages and content blocks stay in the Anthropic Messages format end to end, as plain
dicts: that is the format of the session history, so no conversion happens on the hot
path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from loopwire.shared.contract.envelopes import ToolSpec, Usage
from loopwire.shared.contract.messages import ContentBlock, Message, message_text, tool_uses


@dataclass
class ModelRequest:
    """One model call, independent of the provider."""

    model: str
    """Model id, e.g. `claude-sonnet-4-5`."""
    messages: list[Message]
    """The conversation in the Anthropic Messages format (alternating user/assistant)."""
    max_tokens: int
    system: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    """Tools offered to the model; empty means none (the provider omits the field)."""
    temperature: float | None = None
    """None leaves the provider's default."""
    prompt_cache: bool = False
    """Place the prompt cache's breakpoints (prompt_cache.py): `system` is then sent as
    `stable_system`, and `notes` after the conversation's last breakpoint."""
    cache_ttl: str = "5m"
    """How long the breakpoints' prefixes are kept (`5m`, or `1h` for a run that may wait on
    a decision: prompt_cache.py)."""
    stable_system: str | None = None
    notes: list[str] = field(default_factory=list)

    def for_model(self, model: str) -> ModelRequest:
        """The same request aimed at another model (used by the fallback chain)."""
        return dataclasses.replace(self, model=model)

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


@dataclass
class ModelResponse:
    """The assistant message a model produced, with what it cost."""

    message: Message
    """`{"role": "assistant", "content": [blocks]}`."""
    stop_reason: str | None
    model: str
    """The model that answered (as reported by the provider)."""
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None

    def text(self) -> str:
        return message_text(self.message)

    def tool_uses(self) -> list[ContentBlock]:
        return tool_uses(self.message)
