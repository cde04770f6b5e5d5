"""MCP tool results as loopwire content.

A `CallToolResult` becomes what the model reads in its `tool_result`:

| MCP                                   | loopwire (Anthropic content blocks)                  |
|---------------------------------------|------------------------------------------------------|
| `text`                                | `{"type": "text", "text": ...}`                      |
| `image` (base64)                      | `{"type": "image", "source": {"type": "base64", ...}}`|
| `resource` with text                  | a text block, headed by the resource's URI           |
| `resource` with a blob, `audio`       | a text block saying what it was (the model cannot read it) |
| `resource_link`                       | a text block with its name and URI                   |
| `structuredContent`                   | its JSON as a text block, unless a text block already holds the same JSON |
| `isError: true`                       | `is_error: true`                                     |

A result of one text block is passed on as a plain string. (The other direction, for
`loopwire mcp`, is in loopwire/mcp_serve.py.)
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from mcp import types

from loopwire.shared.contract.messages import ContentBlock, text_block

from .invoke import Content, Outcome


def outcome_of(result: types.CallToolResult) -> Outcome:
    blocks = [_block(item) for item in result.content]
    structured = result.structured_content
    if structured is not None and not _already_there(structured, blocks):
        blocks.append({"type": "text", "text": orjson.dumps(structured).decode()})
    content: Content
    if not blocks:
        content = ""
    elif len(blocks) == 1 and blocks[0]["type"] == "text":
        content = blocks[0]["text"]
    else:
        content = blocks
    return Outcome(content, is_error=bool(result.is_error))


def _block(item: Any) -> ContentBlock:
    if isinstance(item, types.TextContent):
        return {"type": "text", "text": item.text}
    if isinstance(item, types.ImageContent):
        return {"type": "image", "source": {"type": "base64", "media_type": item.mime_type, "data": item.data}}
    if isinstance(item, types.AudioContent):
        return _text(f"[audio ({item.mime_type}), {_decoded_size(item.data)} bytes: not shown]")
    if isinstance(item, types.EmbeddedResource):
        res = item.resource
        if isinstance(res, types.TextResourceContents):
            return _text(f"[resource {res.uri}]\n{res.text}")
        return _text(f"[resource {res.uri} ({res.mime_type or 'binary'}), "
                     f"{_decoded_size(res.blob)} bytes: not shown]")
    if isinstance(item, types.ResourceLink):
        return _text(f"[resource link {item.name}: {item.uri}]")
    return _text(f"[{getattr(item, 'type', 'unknown')} content: not shown]")


def _text(text: str) -> ContentBlock:
    return text_block(text)


def _decoded_size(b64: str) -> int:
    return len(b64) * 3 // 4


def _already_there(structured: Any, blocks: list[ContentBlock]) -> bool:
    """Servers are asked to repeat structured content as text (MCP spec, "Structured
    Content"): the SDK's MCPServer sends a model's JSON, and a plain return value `v` as the
    text `v` with the structured content `{"result": v}`. Then the model needs it once."""
    candidates = [structured]
    if isinstance(structured, dict) and len(structured) == 1:
        candidates.append(next(iter(structured.values())))
    for block in blocks:
        if block["type"] != "text":
            continue
        text = block["text"]
        if text in candidates:
            return True
        try:
            if json.loads(text) in candidates:
                return True
        except ValueError:
            continue
    return False
