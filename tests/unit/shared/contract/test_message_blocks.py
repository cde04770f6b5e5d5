"""The content blocks a client sends are validated by their known keys' types and otherwise
kept as sent: every block shape of the Messages API reaches the model unchanged, and a known
key of the wrong type is refused at ingress with a clear error."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from loopwire.shared.contract.protocol import StartRun

pytestmark = pytest.mark.unit

BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "Look at these.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
    {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}, "title": "A",
     "context": "the spec", "citations": {"enabled": True}},
    {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "chunk"}]}},
    {"type": "document", "source": {"type": "file", "file_id": "file_01"}},
    {"type": "search_result", "source": "https://example.com/page", "title": "Page",
     "content": [{"type": "text", "text": "what it says"}], "citations": {"enabled": True}},
    {"type": "some_future_block", "anything": {"nested": [1, 2]}},
]


def start(content: list[dict[str, Any]]) -> StartRun:
    return StartRun.model_validate({"input": [{"role": "user", "content": content}]})


def test_every_block_shape_is_kept_as_sent() -> None:
    run = start(BLOCKS)
    assert isinstance(run.input, list)
    sent = orjson.loads(orjson.dumps(run.input[0].content))
    assert sent == BLOCKS


@pytest.mark.parametrize("block", [{"type": "text", "text": 5},
                                   {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": 1},
                                   {"type": "text", "text": "x", "cache_control": {"type": "persistent"}}])
def test_a_known_key_of_the_wrong_type_is_refused(block: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        start([block])
