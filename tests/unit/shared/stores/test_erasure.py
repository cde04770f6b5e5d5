"""What a session delete reads of the keys it finds (shared/stores/erasure.py): every key
of a session names it by its hash tag, so the delete's SCAN finds it and files it under a
store of the receipt; the receipt lists every store; references to large content are
found in what a key holds; and a tenant's query of another tenant's session is refused
`forbidden` for a delete or an export."""

from __future__ import annotations

import orjson
import pytest

from loopwire.shared.contract import keys
from loopwire.shared.contract.protocol import (
    SessionDeleteRequest,
    SessionExportRequest,
    SessionGetRequest,
)
from loopwire.shared.contract.query_parsing import parse_query
from loopwire.shared.contract.session_state import DELETED, SessionState, is_deleted
from loopwire.shared.stores.erasure import STORES, blob_refs, receipt, store_of

pytestmark = pytest.mark.unit

SID = "acme.s-1"

SESSION_KEYS = {
    keys.session_state(SID): "session_state",
    keys.session_history(SID): "history",
    keys.event_seq(SID): "event_log",
    keys.event_dedup(SID): "event_log",
    keys.event_stream(SID): "event_log",
    keys.memory(SID, "obs"): "memory",
    keys.memory(SID, "compaction"): "memory",
    keys.memory_lock(SID, "obs"): "memory",
    keys.memory_step_usage(SID, "r1:g1"): "memory",
    keys.session_forks(SID): "indexes",
    keys.executor_session(SID): "executor",
    keys.session_users(SID): "user_index",
    keys.step_record(keys.generation_step(SID, "r1:g1")): "step_records",
    keys.step_claim(keys.tool_batch_step(SID, "r1:t1")): "step_records",
    keys.step_fence(keys.tool_call_step(SID, "toolu_1")): "step_records",
    keys.model_wait(SID): "step_records",
}


@pytest.mark.parametrize(("key", "store"), SESSION_KEYS.items())
def test_every_key_of_a_session_carries_its_tag_and_has_a_store(key: str, store: str) -> None:
    assert keys.session_tag(SID) in key
    pattern = keys.session_key_pattern(SID)
    assert pattern.startswith("*") and pattern.endswith("*") and pattern.strip("*") == keys.session_tag(SID)
    assert store_of(key) == store


def test_the_receipt_lists_every_store_in_order() -> None:
    from collections import Counter

    stores = receipt(Counter({"history": 4, "blobs": 1, "other": 2}))
    assert [s["store"] for s in stores] == [*STORES, "other"]
    assert {s["store"]: s["removed"] for s in stores}["history"] == 4
    assert all(s["removed"] == 0 for s in stores if s["store"] not in ("history", "blobs", "other"))


def test_references_to_large_content_are_found_in_any_value() -> None:
    digest = "ab" * 32
    block = {"type": "text", "text": "big…", "loopwire_ref": {"sha256": digest, "bytes": 9}}
    nested = orjson.dumps({"content": [{"type": "tool_result", "content": [block]}]})
    assert blob_refs(nested) == {digest}
    assert blob_refs(b'{"text": "no reference here"}') == set()


def test_a_tombstone_is_a_state_every_reader_takes_for_none() -> None:
    raw = {**SessionState(session_id=SID).dump(), DELETED: True}
    assert is_deleted(raw) and not is_deleted(SessionState(session_id=SID).dump()) and not is_deleted(None)
    assert SessionState.load(raw, SID).session_id == SID  # still readable: the delete reads it


@pytest.mark.parametrize("model", [SessionDeleteRequest, SessionExportRequest])
def test_a_tenant_may_not_delete_or_export_another_tenants_session(model: type) -> None:
    body = orjson.dumps({"session_id": "globex.s-1"})
    refused = parse_query(body, model, tenants=True, tenant="acme")
    assert isinstance(refused, dict) and refused["error"]["code"] == "forbidden"
    own = parse_query(orjson.dumps({"session_id": "s-1"}), model, tenants=True, tenant="acme")
    assert not isinstance(own, dict) and own.session_id == "acme.s-1"
    # the operator's subject names any tenant's
    anyone = parse_query(body, model, tenants=True, tenant=None)
    assert not isinstance(anyone, dict) and anyone.session_id == "globex.s-1"


def test_reading_another_tenants_session_is_still_refused_as_before() -> None:
    refused = parse_query(
        orjson.dumps({"session_id": "globex.s-1"}), SessionGetRequest, tenants=True, tenant="acme"
    )
    assert isinstance(refused, dict) and refused["error"]["code"] == "invalid_session_id"
