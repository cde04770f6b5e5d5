"""Where large content's references are found (shared/stores/blobs.py)."""

from __future__ import annotations

from loopwire.shared.stores.blobs import REF_KEY


def test_references_are_found_where_externalize_puts_them_and_only_there() -> None:
    from loopwire.shared.stores.blobs import messages_have_refs

    ref = {"type": "text", "text": "preview", REF_KEY: {"sha256": "ab", "bytes": 10}}
    assert not messages_have_refs([{"role": "user", "content": "plain"},
                                   {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}])
    assert messages_have_refs([{"role": "user", "content": [ref]}])
    assert messages_have_refs([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [ref]}]}])
    # A tool's input that happens to hold the key is the model's data, not a reference.
    assert not messages_have_refs([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "x", "input": {REF_KEY: {"sha256": "ab"}}}]}])
