"""docs/asyncapi.json is generated from the code and kept in sync."""

from __future__ import annotations

import json

import pytest

from loopwire.asyncapi import asyncapi_document, asyncapi_json
from loopwire.shared.contract.events import EVENT_MODELS, validate_event
from loopwire.shared.contract.protocol import ADDED_EVENT_KINDS, EVENT_KINDS
from loopwire.shared.contract.subjects import INGRESS_VERBS
from tests.paths import REPO

pytestmark = pytest.mark.unit

DOC = REPO / "docs" / "asyncapi.json"


def test_checked_in_document_matches_the_code() -> None:
    assert DOC.read_text() == asyncapi_json(), "regenerate with: make docs"


def test_every_public_subject_is_documented() -> None:
    channels = asyncapi_document()["channels"]
    addresses = {c["address"] for c in channels.values()}
    for verb in INGRESS_VERBS:
        assert f"loopwire.in.{{sid}}.{verb}" in addresses
    for kind in EVENT_KINDS + ADDED_EVENT_KINDS:
        assert f"loopwire.out.{{sid}}.{kind}" in addresses
    assert {"loopwire.api.session.get", "loopwire.api.transcript.get"} <= addresses


def test_start_schema_carries_the_contract_fields() -> None:
    schemas = json.dumps(asyncapi_document()["components"]["schemas"])
    for field in ("profile", "tool_permissions", "max_total_tokens", "compaction_at_pct", "fallbacks"):
        assert field in schemas


def test_event_models_cover_every_kind_and_reject_bad_bodies() -> None:
    assert set(EVENT_MODELS) == set(EVENT_KINDS) | set(ADDED_EVENT_KINDS)
    ok = {"v": 1, "session_id": "s", "run_id": "r", "seq": 3, "kind": "run.ended", "ts": "2026-01-01T00:00:00Z",
          "status": "completed", "final_text": "x", "conclusion": None, "turns": 1,
          "usage": {"input_tokens": 1, "output_tokens": 2}, "cost_usd": 0.0}
    validate_event(ok)
    with pytest.raises(ValueError):
        validate_event({**ok, "status": "exploded"})
    with pytest.raises(ValueError):
        validate_event({**ok, "seq": 0})
