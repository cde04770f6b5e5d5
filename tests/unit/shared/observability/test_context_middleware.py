"""Log lines of a handler carry the session and run of the message it handles."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from faststream.nats import NatsBroker, NatsMessage, TestNatsBroker

from loopwire.shared.observability.context_middleware import (
    RUN_HEADER,
    SESSION_HEADER,
    ContextMiddleware,
    session_from_subject,
)
from loopwire.shared.observability.logs import session_id_var, setup_logging

pytestmark = pytest.mark.unit


def test_session_from_subject() -> None:
    assert session_from_subject("loopwire.in.s-1.start") == "s-1"
    assert session_from_subject("pfx.out.abc.text.delta") == "abc"
    assert session_from_subject("loopwire.work.llm.generate") is None


async def test_handler_sees_session_and_run_from_headers_and_subjects() -> None:
    broker = NatsBroker(middlewares=[ContextMiddleware])
    seen: list[Any] = []

    @broker.subscriber("loopwire.work.llm.generate")
    async def work(msg: NatsMessage) -> None:
        seen.append(session_id_var.get())

    @broker.subscriber("loopwire.in.*.start")
    async def ingress(msg: NatsMessage) -> None:
        seen.append(session_id_var.get())

    async with TestNatsBroker(broker) as br:
        await br.publish(b"{}", "loopwire.work.llm.generate", headers={SESSION_HEADER: "s9", RUN_HEADER: "r9"})
        await br.publish(b"{}", "loopwire.in.s7.start")
    assert seen == ["s9", "s7"]
    assert session_id_var.get() is None, "the context does not leak out of the handler"


def test_json_log_lines_carry_the_ids() -> None:
    from loopwire.shared.observability.logs import log_context

    stream = io.StringIO()
    setup_logging("INFO", json=True, stream=stream)
    import logging

    with log_context(session_id="s1", run_id="r1"):
        logging.getLogger("loopwire.test").info("hello")
    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert line["session_id"] == "s1" and line["run_id"] == "r1" and line["msg"] == "hello"
