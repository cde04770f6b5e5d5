"""Large content by reference: stored once, content-addressed, carried as a small block.

A tool result larger than `LOOPWIRE_LARGE_CONTENT_BYTES` is stored in Redis under
its sha256 (keys.blob) and replaced, wherever it travels (the ToolsResult envelope, the
session history, the `tool.result` event, every later Generate envelope), by one text
block holding a preview and the reference:

    {"type": "text", "text": "<first bytes>…", "loopwire_ref": {"sha256": "…", "bytes": 5242880}}

So no NATS message comes near the server's max_payload, and a long conversation that
carries a large result stores it once instead of once per turn. The llm service swaps
every reference back for the full text just before the model call (`resolve_messages`);
the Messages API never sees a `loopwire_ref`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import redis.asyncio as aioredis

from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.messages import Content, ContentBlock, Message, is_block, text_of

REF_KEY: Final = "loopwire_ref"
PREVIEW_CHARS = 2000


class BlobStore:
    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0) -> None:
        self._r = redis
        self._ttl = ttl_s

    async def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        # NX: content-addressed, so an existing blob is already this content; the TTL is
        # refreshed so a blob lives as long as its latest use.
        await self._r.set(keys.blob(digest), data, nx=True, ex=self._ttl or None)
        if self._ttl:
            await self._r.expire(keys.blob(digest), self._ttl)
        return digest

    async def get(self, digest: str) -> bytes | None:
        data = await self._r.get(keys.blob(digest))
        return data if data is None or isinstance(data, bytes) else data.encode()


def content_size(content: Content) -> int:
    if isinstance(content, str):
        return len(content.encode())
    return len(codec.dumps(content))


async def externalize(content: Content, blobs: BlobStore,
                      threshold: int) -> Content:
    """`content` as it is when small; else one reference block (the full content, a
    string or a block list, is stored as JSON so it comes back exactly)."""
    size = content_size(content)
    if size <= threshold:
        return content
    digest = await blobs.put(codec.dumps(content))
    text = text_of(content)
    preview = text[:PREVIEW_CHARS]
    note = f"\n… [{size} bytes in all; the model receives the full content]"
    return [{"type": "text", "text": preview + note, REF_KEY: {"sha256": digest, "bytes": size}}]


def messages_have_refs(messages: list[Message]) -> bool:
    """Whether any reference block is where `externalize` puts them: a content block of a
    message, or a block inside a tool_result's content. Looks nowhere else (tool inputs,
    texts), so it costs one pass over the blocks, not a walk of every value: it runs on
    the whole history for every generation."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if REF_KEY in block:
                return True
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list) and any(
                    isinstance(b, dict) and REF_KEY in b for b in inner):
                return True
    return False


async def resolve_messages(messages: list[Message], blobs: BlobStore) -> list[Message]:
    """Messages with every reference block replaced by its full content."""
    if not messages_have_refs(messages):
        return messages
    out: list[Message] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            resolved: list[ContentBlock] = []
            for block in content:
                item = await _resolve_block(block, blobs)
                resolved.extend(item if isinstance(item, list) else [item])
            content = resolved
        out.append({**message, "content": content})
    return out


async def _resolve_block(block: Any, blobs: BlobStore) -> Any:
    if not is_block(block):
        return block
    if REF_KEY in block:
        return await _expand(block, blobs)
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        parts: list[Any] = []
        for inner in block["content"]:
            expanded = await _expand(inner, blobs) if is_block(inner) and REF_KEY in inner else inner
            if isinstance(expanded, list):
                parts.extend(expanded)
            else:
                parts.append(expanded)
        return {**block, "content": parts}
    return block


async def _expand(block: ContentBlock, blobs: BlobStore) -> Any:
    ref = block[REF_KEY]
    data = await blobs.get(ref["sha256"])
    if data is None:
        # Expired or lost: the model gets the preview and is told, rather than a failure.
        return {"type": "text", "text": block.get("text", "") + "\n[the full content is no longer available]"}
    full = codec.loads(data)
    if isinstance(full, str):
        return {"type": "text", "text": full}
    return full
