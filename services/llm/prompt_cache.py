"""The prompt cache's breakpoints on a Messages API request (StartRun `model.prompt_cache`).

An agent loop sends its whole context again every turn; a cached prefix is read at a tenth
of the input price. The API caches the prefix that ends at a block marked `cache_control`
(at most four per request), and a later request reads it when its own prefix up to that
point is the same, byte for byte, in the API's order: tools, then system, then messages.
So each request carries three breakpoints, each at the end of what stays the same:

1. the last tool, the tools in the order memory gives them, which is canonical already
   (the run's own order, or the catalog's sorted by name, then the reserved tools:
   services/memory/assembly.py), whatever order a catalog refresh read them in;
2. the system prompt without this step's notes (`stable_system`: the run's own system; the
   memory sections ride with the notes, since an observation may come at any turn);
3. the last block of the conversation so far.

The step's ephemeral notes (the memory sections, progress reminder, context-pressure note,
plan status, workspace snapshot) change from turn to turn, so they go after the last breakpoint: a text block
at the end of the last user message, for this request only. The next request's
conversation holds this one's as its prefix (notes are never stored in the history), so
the API finds the previous breakpoint within its lookback and reads everything before it.
After a compaction the conversation's head changes: that request writes a new prefix and
the ones after it read it.

A cached prefix lasts 5 minutes after its last use. A run that may stop for a person's
decision (`ModelRequest.cache_ttl` `1h`: every turn reviewed, or a tool under `approve`)
marks its breakpoints with the API's 1-hour TTL instead: it writes at 2x the input price
rather than 1.25x, and still reads its prefix after a wait of up to an hour.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract.messages import CacheControl, ContentBlock, Message, text_block

from .model_call import ModelRequest

EPHEMERAL: CacheControl = {"type": "ephemeral"}
EPHEMERAL_1H: CacheControl = {"type": "ephemeral", "ttl": "1h"}


def reminders(notes: list[str]) -> str:
    """The notes as the memory service writes them into a system prompt (assembly.py)."""
    return "\n".join(f"<system-reminder>{n}</system-reminder>" for n in notes)


def marked(block: ContentBlock, ttl: str = "5m") -> ContentBlock:
    return {**block, "cache_control": EPHEMERAL_1H if ttl == "1h" else EPHEMERAL}


def cached_params(request: ModelRequest, params: dict[str, Any]) -> dict[str, Any]:
    """`params` (request_params') with the breakpoints placed and the notes moved after
    the last one; `params` itself is left as it was."""
    out = dict(params)
    ttl = request.cache_ttl
    if out.get("tools"):
        tools = out["tools"]
        out["tools"] = [*tools[:-1], marked(tools[-1], ttl)]
    system = request.stable_system
    notes = list(request.notes)
    messages: list[Message] = [m.copy() for m in request.messages]
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "user":
        content = last.get("content")
        blocks = [text_block(content)] if isinstance(content, str) else list(content or [])
        if blocks:
            blocks[-1] = marked(blocks[-1], ttl)
            if notes:
                blocks.append({"type": "text", "text": reminders(notes)})
                notes = []
            last["content"] = blocks
    # Notes that found no user message to ride on stay in the system prompt, after its breakpoint.
    system_blocks = ([marked({"type": "text", "text": system}, ttl)] if system else []) + \
        ([{"type": "text", "text": reminders(notes)}] if notes else [])
    if system_blocks:
        out["system"] = system_blocks
    else:
        out.pop("system", None)
    out["messages"] = messages
    return out
