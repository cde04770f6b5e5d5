"""The checks the real Messages API makes of a request's history, which the fake makes
too (fake_anthropic_http.py): it answers 400 `invalid_request_error` with the API's own
wording, as the real API would, so a history loopwire builds wrong (after a crash, a
fork, a steer, a rebuild or a compaction) fails a test instead of passing against a
lenient fake.

- Every message has content (a string or blocks), except a final assistant message
  (a prefill); no text block is empty.
- A `tool_use` block is answered by a `tool_result` with its id in the very next
  message, and those results come first in that message.
- A `tool_result` answers a `tool_use` of the message right before it.
"""

from __future__ import annotations

from typing import Any


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _tool_use_ids(message: dict[str, Any] | None) -> list[str]:
    if message is None or message.get("role") != "assistant":
        return []
    return [str(b.get("id")) for b in _blocks(message) if b.get("type") == "tool_use"]


def history_problem(messages: list[Any]) -> str | None:
    """The real API's error message for the first rule `messages` breaks, or None."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        content = message.get("content")
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if not content and not final_assistant:
            return (f"messages.{i}: all messages must have non-empty content except for the optional "
                    "final assistant message")
        blocks = _blocks(message)
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{i}.content.{j}: text content blocks must be non-empty"
        asked = _tool_use_ids(messages[i - 1] if i else None)
        for j, block in enumerate(blocks):
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message.")
        if asked and message.get("role") == "user":
            leading = set()
            for block in blocks:
                if block.get("type") != "tool_result":
                    break
                leading.add(block.get("tool_use_id"))
            if not set(asked) <= leading:
                return (f"messages.{i}: Did not find {len(asked)} `tool_result` block(s) at the beginning of "
                        "this message. Messages following `tool_use` blocks must begin with a matching "
                        "number of `tool_result` blocks.")
        uses = _tool_use_ids(message)
        if uses and i + 1 < len(messages):
            following = messages[i + 1]
            answered = {b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"} \
                if isinstance(following, dict) and following.get("role") == "user" else set()
            missing = [u for u in uses if u not in answered]
            if missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                        "`tool_result` block in the next message.")
    return None
