"""work_consumer.root_delivery: a JetStream message as the root of a work chain, and
its one notion of "this delivery may repeat work" (`redelivered`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from loopwire.shared.runtime.bus import ATTEMPTS_HEADER, RECOVER_HEADER
from loopwire.shared.runtime.work_consumer import JetStreamRoot, root_delivery

pytestmark = pytest.mark.unit


def message(delivered: Any, headers: dict[str, str] | None = None) -> Any:
    metadata = SimpleNamespace(num_delivered=delivered)
    return JetStreamRoot(SimpleNamespace(data=b"{}", metadata=metadata, headers=headers))  # type: ignore[arg-type]


def test_a_first_delivery_of_new_work_repeats_nothing() -> None:
    delivery = root_delivery(message(1, {"Nats-Msg-Id": "x"}), 30.0, True)
    assert delivery.redelivered is False and delivery.chain.delivered == 1


def test_a_redelivery_or_a_recovering_result_may_repeat_work() -> None:
    assert root_delivery(message(2), 30.0, True).redelivered is True
    assert root_delivery(message(1, {RECOVER_HEADER: "1"}), 30.0, True).redelivered is True


def test_a_hop_that_failed_in_process_counts_its_attempt_there() -> None:
    # Its budget is its own and the same as on the JetStream path (shared/runtime/chain.py).
    delivery = root_delivery(message(1, {ATTEMPTS_HEADER: "1"}), 30.0, True)
    assert delivery.chain.delivered == 2 and delivery.redelivered is True
    assert root_delivery(message(1, {ATTEMPTS_HEADER: "junk"}), 30.0, True).chain.delivered == 1


def test_a_message_without_jetstream_metadata_is_a_first_delivery() -> None:
    delivery = root_delivery(JetStreamRoot(SimpleNamespace(data=b"{}", headers=None)), 30.0, True)  # type: ignore[arg-type]
    assert delivery.chain.delivered == 1 and delivery.redelivered is False
