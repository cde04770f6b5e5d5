"""shared/observability/logs.py: ids on every line, JSON and text, redaction, context that follows tasks."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable, Iterator

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from loopwire.shared.observability import tracing
from loopwire.shared.observability.logs import log_context, run_id_var, session_id_var, setup_logging

pytestmark = pytest.mark.unit

Install = Callable[[bool], tuple[io.StringIO, logging.Logger]]

FAKE_KEY = "sk-ant-api03-Zx9yFAKEfakeFAKE_0123456789-abcdefABCDEF"


@pytest.fixture
def capture() -> Iterator[Install]:
    """setup_logging on a string stream; restores the root logger afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()

    def install(json: bool) -> tuple[io.StringIO, logging.Logger]:
        setup_logging("DEBUG", json=json, stream=stream)
        return stream, logging.getLogger("loopwire.test")

    yield install
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def _json_lines(stream: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines() if line]


def test_json_lines_carry_ids_and_trace(capture: Install) -> None:
    stream, log = capture(True)
    provider = TracerProvider()
    tracing.set_tracer_provider(provider)
    try:
        with log_context(session_id="s1", run_id="r1"):
            with tracing.invoke_agent_span("agentic", "s1") as span:
                log.info("turn %d started", 3, extra={"turn": 3})
                trace_id = format(span.get_span_context().trace_id, "032x")
        log.warning("outside")
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()

    inside, outside = _json_lines(stream)
    assert inside["msg"] == "turn 3 started"
    assert inside["level"] == "INFO"
    assert inside["logger"] == "loopwire.test"
    assert (inside["session_id"], inside["run_id"], inside["trace_id"]) == ("s1", "r1", trace_id)
    assert inside["turn"] == 3
    assert inside["ts"].endswith("Z")
    assert (outside["session_id"], outside["run_id"], outside["trace_id"]) == (None, None, None)


def test_text_lines_are_readable(capture: Install) -> None:
    stream, log = capture(False)
    with log_context(session_id="s1", run_id="r9"):
        log.info("hello")
    log.info("bare")
    first, second = stream.getvalue().splitlines()
    assert "INFO  loopwire.test [sid=s1 run=r9] hello" in first
    assert second.endswith("INFO  loopwire.test bare")


def test_keys_are_redacted_in_messages_extras_and_tracebacks(capture: Install) -> None:
    stream, log = capture(True)
    log.info("calling with %s", f"x-api-key: {FAKE_KEY}", extra={"headers": {"authorization": "Bearer abc"}})
    try:
        raise ValueError(f"bad key {FAKE_KEY}")
    except ValueError:
        log.exception("failed")
    text = stream.getvalue()
    assert FAKE_KEY not in text
    first, second = _json_lines(stream)
    assert first["msg"] == "calling with x-api-key: ***"
    assert first["headers"] == {"authorization": "***"}
    assert "ValueError: bad key sk-ant-***" in second["exc"]


def test_text_tracebacks_are_redacted_too(capture: Install) -> None:
    stream, log = capture(False)
    try:
        raise ValueError(f"bad key {FAKE_KEY}")
    except ValueError:
        log.exception("failed")
    assert FAKE_KEY not in stream.getvalue()
    assert "sk-ant-***" in stream.getvalue()


async def test_context_follows_tasks_and_is_restored(capture: Install) -> None:
    stream, log = capture(True)

    async def work(sid: str) -> None:
        with log_context(session_id=sid, run_id=f"run-{sid}"):
            await asyncio.sleep(0)  # interleave the two tasks
            log.info("working")

    await asyncio.gather(work("a"), work("b"))
    with log_context(session_id="outer"):
        with log_context(run_id="inner-run"):
            assert (session_id_var.get(), run_id_var.get()) == ("outer", "inner-run")
        assert run_id_var.get() is None
    assert session_id_var.get() is None
    lines = _json_lines(stream)
    assert sorted((line["session_id"], line["run_id"]) for line in lines) == [("a", "run-a"), ("b", "run-b")]


def test_setup_twice_keeps_one_handler(capture: Install) -> None:
    stream, log = capture(False)
    setup_logging("INFO", json=True, stream=stream)
    log.info("once")
    assert len(stream.getvalue().splitlines()) == 1
    assert orjson.loads(stream.getvalue())["msg"] == "once"
