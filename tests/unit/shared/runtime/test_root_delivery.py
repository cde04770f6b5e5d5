"""work_consumer.root_delivery: a JetStream message as the root of a work chain, and
its one notion of "this delivery may repeat work" (`redelivered`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError

from loopwire.shared.runtime.bus import ATTEMPTS_HEADER, RECOVER_HEADER
from loopwire.shared.runtime.work_consumer import JetStreamRoot, delivery_metadata, root_delivery

pytestmark = pytest.mark.unit


def message(delivered: Any, headers: dict[str, str] | None = None) -> Any:
    reply = f"$JS.ACK.LOOPWIRE_WORK.lw_tools.{delivered}.695.205.1796529108849393216.0"
    return JetStreamRoot(SimpleNamespace(data=b"{}", reply=reply, headers=headers))  # type: ignore[arg-type]


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
    delivery = root_delivery(JetStreamRoot(SimpleNamespace(data=b"{}", reply="_INBOX.x", headers=None)), 30.0, True)  # type: ignore[arg-type]
    assert delivery.chain.delivered == 1 and delivery.redelivered is False


@pytest.mark.parametrize("reply", [
    "$JS.ACK.LOOPWIRE_WORK.loopwire_tools.3.695.205.1796529108849393216.7",
    "$JS.ACK.hub.ACCHASH.LOOPWIRE_WORK.loopwire_tools.3.695.205.1796529108849393216.7.rnd",
    "$JS.ACK._.ACCHASH.LOOPWIRE_WORK.loopwire_tools.1.2.3.1796529108849393216.0",
])
def test_the_metadata_is_what_nats_py_reads_from_the_reply(reply: str) -> None:
    ours, theirs = delivery_metadata(reply), Msg.Metadata._from_reply(reply)
    assert (ours.stream, ours.consumer, ours.num_delivered, ours.stream_seq, ours.consumer_seq, ours.num_pending) == (
        theirs.stream, theirs.consumer, theirs.num_delivered, theirs.sequence.stream, theirs.sequence.consumer,
        theirs.num_pending)


@pytest.mark.parametrize("reply", ["", "_INBOX.abc.def", "$JS.API.X.a.1.2.3.4.5", "$JS.ACK.too.short"])
def test_a_reply_that_is_no_ack_subject_has_no_metadata(reply: str) -> None:
    with pytest.raises(NotJSMessageError):
        delivery_metadata(reply)
    with pytest.raises(NotJSMessageError):
        Msg.Metadata._from_reply(reply)
