"""Large content stored once in Redis and resolved back (shared/stores/blobs.py)."""

from __future__ import annotations

import pytest

from loopwire.shared.contract import codec
from loopwire.shared.stores.blobs import REF_KEY, BlobStore, externalize, resolve_messages


@pytest.mark.integration
async def test_externalize_and_resolve_round_trip(redis_client: object) -> None:
    blobs = BlobStore(redis_client)  # type: ignore[arg-type]
    small = await externalize("tiny", blobs, threshold=100)
    assert small == "tiny"
    blocks = [{"type": "text", "text": "a" * 500}, {"type": "text", "text": "b"}]
    ref = await externalize(blocks, blobs, threshold=100)
    assert isinstance(ref, list) and REF_KEY in ref[0] and len(codec.dumps(ref)) < 3000
    again = await externalize(blocks, blobs, threshold=100)
    assert again == ref, "content-addressed: the same content, the same reference"
    messages = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ref}]}]
    resolved = await resolve_messages(messages, blobs)
    assert resolved[0]["content"][0]["content"] == blocks
    assert await resolve_messages([{"role": "user", "content": "plain"}], blobs) == [
        {"role": "user", "content": "plain"}]
