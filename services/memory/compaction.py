"""Compaction as data: where the summarised span ends, how the compacted context looks,
and what the summariser is asked. Pure functions; the context guard drives them.

The shape of a compacted context::

    [first user request + <conversation-summary> of history[1:covers]]  (one user message)
    history[covers:]                                                    (verbatim)

- The first user request is never summarised: it states the task.
- `covers` is always the index of an assistant message, so the tail starts with the
  assistant and alternation holds; and it is never inside a tool pair: no tool_result in
  the tail answers a tool_use in the summarised span (the API rejects an orphan result).
- The latest `keep_turns` turns (an assistant message and what follows it) stay verbatim.
- The full history stays in Redis and in the transcript; only the request is compacted.
  The summary is stored per session (`CompactionRecord`) and reused by later
  generations, which summarise incrementally past it: previous summary + the next span.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, Field

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock, Message, is_tool_result

from .assembly import normalise_messages

if TYPE_CHECKING:
    from .history_memo import HistoryMemo

SUMMARY_SYSTEM = (
    "You condense the earlier part of a conversation between a user and an AI assistant so "
    "the conversation can continue within a limited context window. The summary replaces "
    "those messages: whatever it leaves out is gone for the assistant.\n"
    "Keep: every fact the user stated (names, numbers, codes, dates, preferences), decisions "
    "taken, what tools were called and what they returned when it still matters, results "
    "reached, and open tasks or promises. Merge the previous summary, if any, with the new "
    "messages into one summary. Write terse notes in the conversation's language, no preamble."
)
DROPPED_NOTE = ("[{n} earlier messages were left out of this request to fit the context window; "
                "the full conversation is kept in the transcript.]")
MAX_BLOCK_CHARS = 4000
"""A tool result or text longer than this is cut for the summariser (head and tail kept)."""


class CompactionRecord(BaseModel):
    """The stored compaction of one session (keys.memory(sid, "compaction"))."""

    covers: int
    """History messages [1, covers) are represented by `summary`; the tail starts at `covers`."""
    summary: str
    fingerprint: str
    """Of the first and the last covered message: a history rebuilt differently (or a
    different session under the same id) does not reuse a summary it does not match."""
    step_id: str
    """The generation that made it (a redelivery of that step re-emits its event)."""
    tokens_before: int = 0
    tokens_after: int = 0
    usage: Usage = Field(default_factory=Usage)
    method: Literal["summary"] = "summary"


# -- tool pairs and boundaries ---------------------------------------------------------------
def _blocks(message: Message) -> list[ContentBlock]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def tool_use_ids(message: Message) -> list[str]:
    return [b["id"] for b in _blocks(message) if isinstance(b, dict) and b.get("type") == "tool_use" and "id" in b]


def tool_result_ids(message: Message) -> list[str]:
    return [b["tool_use_id"] for b in _blocks(message) if is_tool_result(b)]


def unsafe_boundaries(messages: list[Message]) -> set[int]:
    """Indices b where cutting `messages[:b] | messages[b:]` would separate a tool_use
    from its tool_result."""
    used_at: dict[str, int] = {}
    unsafe: set[int] = set()
    for i, message in enumerate(messages):
        for tid in tool_result_ids(message):
            start = used_at.get(tid)
            if start is not None:
                unsafe.update(range(start + 1, i + 1))
        for tid in tool_use_ids(message):
            used_at[tid] = i
    return unsafe


def boundary_candidates(rest: list[Message], keep_turns: int) -> list[int]:
    """Positions j >= 1 in `rest` where the tail `rest[j:]` may start: an assistant
    message, not inside a tool pair, and at or before the start of the latest
    `keep_turns` turns (which stay verbatim)."""
    assistants = [j for j, m in enumerate(rest) if m.get("role") == "assistant"]
    if keep_turns <= 0:
        keep_from = len(rest)
    elif len(assistants) >= keep_turns:
        keep_from = assistants[-keep_turns]
    else:
        return []
    unsafe = unsafe_boundaries(rest)
    # A tool_result in rest[j:] answering a tool_use before rest (in an older span) cannot
    # be paired either: results whose use is not in `rest` at all make every j up to them
    # unsafe.
    seen: set[str] = set()
    last_orphan = -1
    for i, message in enumerate(rest):
        seen.update(tool_use_ids(message))
        if any(tid not in seen for tid in tool_result_ids(message)):
            last_orphan = i
    return [j for j in assistants if 1 <= j <= keep_from and j not in unsafe and j > last_orphan]


def choose_boundary(rest: list[Message], tokens: list[int], budget: int, *, keep_turns: int) -> int | None:
    """The earliest candidate whose tail fits `budget` tokens (the most history kept
    verbatim), else the latest candidate (as much summarised as allowed); None when no
    message may be summarised."""
    candidates = boundary_candidates(rest, keep_turns)
    if not candidates:
        return None
    suffix = [0] * (len(rest) + 1)
    for i in range(len(rest) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + tokens[i]
    for j in candidates:
        if suffix[j] <= budget:
            return j
    return candidates[-1]


# -- the compacted context -------------------------------------------------------------------
def summary_block(summary: str, covered: int) -> ContentBlock:
    return {"type": "text", "text": (
        f"<conversation-summary>\nSummary of the {covered} messages that followed this request, "
        f"condensed to fit the context window:\n{summary.strip()}\n</conversation-summary>")}


def assemble(head: Message | None, summary: str | None, covers: int, *, tail: list[Message],
             dropped: int = 0, memo: HistoryMemo | None = None) -> list[Message]:
    """The request's messages: the first request (with the summary of [1, covers) and a
    note about dropped messages in the same user message), then the verbatim tail.
    `memo`: where the messages were decoded (normalise_messages)."""
    if head is None:
        return normalise_messages(tail, memo)
    content = head.get("content")
    blocks: list[ContentBlock] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    if summary:
        blocks.append(summary_block(summary, covers - 1))
    if dropped:
        blocks.append({"type": "text", "text": DROPPED_NOTE.format(n=dropped)})
    return normalise_messages([{"role": head.get("role", "user"), "content": blocks}, *tail], memo)


def fingerprint(first: Message | None, last_covered: Message | None, covers: int) -> str:
    digest = hashlib.sha256(orjson.dumps([covers, first, last_covered], option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()[:32]


# -- what the summariser reads -------------------------------------------------------------------
def _cut(text: str, limit: int = MAX_BLOCK_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - limit} characters left out ...] {text[-half:]}"


def _render_block(block: Any) -> str:
    if isinstance(block, str):
        return _cut(block)
    if not isinstance(block, dict):
        return _cut(orjson.dumps(block).decode())
    kind = block.get("type")
    if kind == "text":
        return _cut(block.get("text", ""))
    if kind == "tool_use":
        return f"[called tool {block.get('name')} with {_cut(orjson.dumps(block.get('input', {})).decode(), 1000)}]"
    if kind == "tool_result":
        content = block.get("content", "")
        text = content if isinstance(content, str) else " ".join(_render_block(b) for b in content)
        flag = " (error)" if block.get("is_error") else ""
        return f"[tool result{flag}: {_cut(text)}]"
    if kind in ("thinking", "redacted_thinking"):
        return ""
    return f"[{kind}]"


def render_transcript(messages: list[Message]) -> str:
    """Messages as plain text for the summariser: tool pairs need no pairing in text,
    and oversized blocks are cut."""
    lines = []
    for message in messages:
        role = "User" if message.get("role") == "user" else "Assistant"
        content = message.get("content")
        parts = [_cut(content)] if isinstance(content, str) else [_render_block(b) for b in content or []]
        text = "\n".join(p for p in parts if p)
        if text:
            lines.append(f"{role}: {text}")
    return "\n\n".join(lines)


def summary_request(previous: str | None, span: list[Message], max_tokens: int) -> list[Message]:
    """The user message asking for the (incremental) summary."""
    parts = []
    if previous:
        parts.append(f"<previous-summary>\n{previous.strip()}\n</previous-summary>")
    parts.append(f"<conversation>\n{render_transcript(span)}\n</conversation>")
    words = max(50, int(max_tokens * 0.6))
    parts.append(f"Write the updated summary of everything above, in at most {words} words.")
    return [{"role": "user", "content": [{"type": "text", "text": "\n\n".join(parts)}]}]


def chunk_span(span: list[Message], tokens: list[int], budget: int) -> list[list[Message]]:
    """`span` in consecutive chunks of at most `budget` tokens each (a single message
    larger than that is a chunk of its own: the renderer cuts its blocks)."""
    chunks: list[list[Message]] = []
    current: list[Message] = []
    used = 0
    for message, cost in zip(span, tokens, strict=True):
        if current and used + cost > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(message)
        used += cost
    if current:
        chunks.append(current)
    return chunks
