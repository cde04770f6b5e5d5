"""What loopwire's models without an API share: a reply built in process.

The scripted model (scripted_model.py), the offline demo model (demo_model.py) and the
bench model (bench_model.py) are real `Model`s, so tests and the offline demo run the very
same service code as the Anthropic provider. Text is streamed as `TextDelta` events in a
few chunks, and usage is a rough word count, so streaming and token budgets behave as with a
real model; ids are derived from the request, so replicas and redeliveries agree.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import orjson

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock

from .model_call import ModelRequest
from .model_events import ModelStream, TextDelta


def split_chunks(text: str, parts: int = 4) -> list[str]:
    """`text` cut at word boundaries into at most `parts` pieces that join back to it."""
    words = re.findall(r"\S+\s*|\s+", text)
    if len(words) <= 1:
        return [text] if text else []
    size = max(1, -(-len(words) // parts))
    return ["".join(words[i:i + size]) for i in range(0, len(words), size)]


_STRUCTURAL_KEYS = frozenset({"type", "role", "id", "tool_use_id", "is_error"})


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):  # the words of the values, not of the structure
        return sum(_words(v) for k, v in value.items() if k not in _STRUCTURAL_KEYS)
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 1 if value is not None else 0


def estimate_usage(request: ModelRequest, content: list[ContentBlock]) -> Usage:
    """Rough tokens: one per word of the prompt (system, messages, tools) and of the answer."""
    prompt = _words(request.system or "") + _words(request.messages)
    prompt += sum(_words(t.name) + _words(t.description) for t in request.tools)
    return Usage(input_tokens=max(1, prompt), output_tokens=max(1, _words(content)))


def stable_id(request: ModelRequest, salt: str) -> str:
    """An id (`toolu_...`) that is the same for the same request (replicas, redeliveries)."""
    digest = hashlib.sha1(orjson.dumps(request.messages, option=orjson.OPT_SORT_KEYS) + salt.encode())
    return f"toolu_{digest.hexdigest()[:20]}"


async def stream_text(text: str, delay_s: float = 0.0) -> ModelStream:
    """`text` in a few `TextDelta`s, as a model streams it."""
    for piece in split_chunks(text):
        if delay_s:
            await asyncio.sleep(delay_s)
        yield TextDelta(piece)


def reply_content(request: ModelRequest, text: str | None, tool_uses: list[ContentBlock]) -> list[ContentBlock]:
    """The content blocks of a reply: its text, then its tool_use blocks (stable ids)."""
    content: list[ContentBlock] = []
    if text:
        content.append({"type": "text", "text": text})
    for i, tu in enumerate(tool_uses):
        content.append({"type": "tool_use", "id": tu.get("id") or stable_id(request, f"{i}:{tu['name']}"),
                        "name": tu["name"], "input": dict(tu.get("input") or {})})
    return content

