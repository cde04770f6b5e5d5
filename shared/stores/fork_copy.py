"""What a fork takes from its source besides the history: the memory's compaction summary
when it still fits, and the lifetime of the content both share by reference.

- The compaction record (keys.memory(sid, "compaction"), services/memory/store.py) summarises
  history messages [1, covers). A fork with at least `covers + 1` messages holds every one
  of them, in the same order, so the record holds for the fork too (its fingerprint, of
  the first and the last covered message, matches) and is copied; one that covers more
  than the fork has is not, and the fork's memory summarises again when it needs to.
- Content stored by reference (blobs.py, keys.blob) is shared, never copied: the
  fork's history carries the same reference blocks. With a TTL, each blob the fork
  refers to is kept a TTL from now, as any use of it would.

The fork's keys carry its own hash tag: on a Redis Cluster these copies go from the
source's slot to the fork's, each its own command, never one script across both.

Observations and reflections stay with the source (the fork makes its own; a strategy
actor's memory across sessions applies to both).
"""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from loopwire.shared.contract import keys
from loopwire.shared.contract.messages import Message
from loopwire.shared.stores.blobs import REF_KEY


def covers_of(raw: bytes | str | None) -> int | None:
    """`covers` of a stored compaction record, or None when there is none to read."""
    if raw is None:
        return None
    try:
        covers = orjson.loads(raw).get("covers")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return covers if isinstance(covers, int) else None


async def copy_compaction(redis: aioredis.Redis, source: str, fork: str, *, history_len: int, ttl_s: int = 0) -> bool:
    """Copy the source's compaction record to the fork when it covers only messages the
    fork has (and leaves at least one after them: the memory uses a record only then)."""
    raw = await redis.get(keys.memory(source, "compaction"))
    covers = covers_of(raw)
    if covers is None or not 2 <= covers < history_len:
        return False
    await redis.set(keys.memory(fork, "compaction"), raw, ex=ttl_s or None)  # type: ignore[arg-type]
    return True


def blob_digests(messages: list[Message]) -> set[str]:
    """The sha256 of every reference block in `messages`, where blobs.externalize puts them:
    a message's content block, or a block inside a tool_result's content."""
    found: set[str] = set()

    def visit(blocks: Any) -> None:
        if not isinstance(blocks, list):
            return
        for block in blocks:
            if not isinstance(block, dict):
                continue
            ref = block.get(REF_KEY)
            if isinstance(ref, dict) and isinstance(ref.get("sha256"), str):
                found.add(ref["sha256"])
            if block.get("type") == "tool_result":
                visit(block.get("content"))

    for message in messages:
        if isinstance(message, dict):
            visit(message.get("content"))
    return found


async def keep_blobs(redis: aioredis.Redis, messages: list[Message], ttl_s: int) -> int:
    """Give every blob `messages` refer to a TTL from now (no TTL: they are kept anyway).
    Returns how many were referred to."""
    digests = blob_digests(messages)
    if ttl_s and digests:
        pipe = redis.pipeline(transaction=False)
        for digest in sorted(digests):
            pipe.expire(keys.blob(digest), ttl_s)
        await pipe.execute()
    return len(digests)
