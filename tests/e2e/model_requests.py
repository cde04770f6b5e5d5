"""Reading what loopwire sent the fake Messages API, whatever the prompt cache did to its
shape (services/llm/prompt_cache.py): the system prompt as blocks with a breakpoint, the
step's notes moved to the end of the last user message, a breakpoint on that message's
last block."""

from __future__ import annotations

from typing import Any

REMINDER = "<system-reminder>"


def _texts(system: Any) -> list[str]:
    if isinstance(system, str):
        return [system]
    return [b.get("text", "") for b in system or [] if isinstance(b, dict)]


def _is_notes(block: dict[str, Any]) -> bool:
    return block.get("type") == "text" and str(block.get("text", "")).startswith(REMINDER)


def system_text(body: dict[str, Any]) -> str:
    """What the model is told besides the conversation: the system prompt, then the
    step's notes (on the system prompt without the cache, after the last breakpoint with it)."""
    parts = _texts(body.get("system"))
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1].get("content"), list):
        parts += [b["text"] for b in messages[-1]["content"] if isinstance(b, dict) and _is_notes(b)]
    return "\n\n".join(p for p in parts if p)


def content(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's blocks as its history holds them: no `cache_control`, no step notes."""
    raw = message.get("content")
    blocks = [{"type": "text", "text": raw}] if isinstance(raw, str) else list(raw or [])
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks if not _is_notes(b)]
