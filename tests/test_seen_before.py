"""runtime.seen_before: when a work consumer must look for a recorded step result."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from loopwire.shared.runtime.bus import REPLAY_HEADER
from loopwire.shared.runtime.service_context import seen_before


def message(delivered: Any, headers: dict[str, str] | None = None) -> Any:
    metadata = SimpleNamespace(num_delivered=delivered)
    return SimpleNamespace(raw_message=SimpleNamespace(metadata=metadata, headers=headers))


def test_a_first_delivery_of_new_work_was_not_seen() -> None:
    assert seen_before(message(1)) is False
    assert seen_before(message(1, {"Nats-Msg-Id": "x"})) is False


def test_a_redelivery_or_a_marked_republish_was_maybe_seen() -> None:
    assert seen_before(message(2)) is True
    assert seen_before(message(1, {REPLAY_HEADER: "1"})) is True


def test_a_message_without_jetstream_metadata_is_treated_as_seen() -> None:
    # e.g. a test broker's message: reading the record costs a round trip, skipping a
    # recorded step would cost a model or tool call.
    assert seen_before(SimpleNamespace(raw_message=SimpleNamespace(headers=None))) is True
