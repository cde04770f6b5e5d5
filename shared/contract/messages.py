"""Messages and content blocks, in the Anthropic Messages format every service keeps them in
(the session history, the model's requests and replies, the events): what a message's text
is, and the one way to write a tool_result block (the `tool.result` event that reports one
to clients: event_fields.tool_result_event).

A message is `{"role", "content"}`; its content a string or a list of blocks (`text`,
`tool_use`, `tool_result`, `image`, `thinking`...), as plain dicts on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_text(block: Any) -> bool:
    """Whether `block` is a text block."""
    return isinstance(block, dict) and block.get("type") == "text"


def text_of(content: Any, sep: str = "") -> str:
    """The text of a message's content: a string is its own text; of a list of blocks, the
    text of its text blocks joined by `sep` (tool calls, tool results, images left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return sep.join(str(b.get("text") or "") for b in content if is_text(b))
    return ""


def message_text(message: Mapping[str, Any] | None) -> str:
    """The text of a message (`text_of` its content); "" for none."""
    return text_of(message.get("content")) if message else ""


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_result_block(tool_use_id: str, content: str | list[dict[str, Any]], *,
                      is_error: bool = False) -> dict[str, Any]:
    """The answer to the tool_use `tool_use_id` in the next user message; `is_error` is
    written only when set, as the Messages API takes it."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def is_tool_result(block: Any) -> bool:
    """Whether `block` is a tool_result block (with the id of the call it answers)."""
    return isinstance(block, dict) and block.get("type") == "tool_result" and "tool_use_id" in block
