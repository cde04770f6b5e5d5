"""The consume scope of a work message (shared/observability/consume_scope.py): the log
context on entry, the message counted at exit, each subject's series looked up once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from loopwire.shared.observability import consume_scope, metrics
from loopwire.shared.observability.logs import run_id_var, session_id_var

pytestmark = pytest.mark.unit


class Meta:
    consumer = "lw_tools"
    num_delivered = 2


class Raw:
    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.headers = {"Nats-Msg-Id": "m1", "Loopwire-Session-Id": "s1", "Loopwire-Run-Id": "r1"}
        self.data = b"x" * 100


class Root:
    def __init__(self, subject: str) -> None:
        self.raw_message = Raw(subject)
        self.metadata = Meta()
        self.outcome: str | None = None


def value(name: str, handler: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(
        name, {"app_name": "loopwire", "broker": "nats", "handler": handler, **labels}) or 0.0


def test_the_log_context_is_set_on_entry_and_the_message_counted_at_exit() -> None:
    subject = f"t{uuid.uuid4().hex[:6]}.work.tools.execute"
    root: Any = Root(subject)
    with consume_scope.ConsumeScope(root):
        assert (session_id_var.get(), run_id_var.get()) == ("s1", "r1")
        assert value("loopwire_faststream_received_messages_in_process", subject) == 1
        assert value("loopwire_faststream_received_messages_total", subject) == 0, "counted at exit"
        root.outcome = "acked"
    assert session_id_var.get() is None and run_id_var.get() is None
    assert value("loopwire_faststream_received_messages_in_process", subject) == 0
    assert value("loopwire_faststream_received_messages_total", subject) == 1
    assert value("loopwire_faststream_received_messages_size_bytes_sum", subject) == 100
    assert value("loopwire_faststream_received_processed_messages_total", subject, status="acked") == 1


def test_a_failed_handler_is_counted_too() -> None:
    subject = f"t{uuid.uuid4().hex[:6]}.work.llm.generate"
    with pytest.raises(RuntimeError), consume_scope.ConsumeScope(Root(subject)):
        raise RuntimeError("boom")
    assert value("loopwire_faststream_received_messages_total", subject) == 1
    assert value("loopwire_faststream_received_processed_messages_total", subject, status="error") == 1


def test_a_subjects_series_is_looked_up_once_and_sessions_are_masked() -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    first = consume_scope._series(f"{prefix}.in.s1.start")
    assert consume_scope._series(f"{prefix}.in.s1.start") is first
    assert consume_scope._series(f"{prefix}.in.s2.start") is first, "one series per masked subject"
