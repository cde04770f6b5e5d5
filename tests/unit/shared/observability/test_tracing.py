"""shared/observability/tracing/ and shared/contract/redaction.py: GenAI spans, W3C propagation,
redaction, opt-in content, setup."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from loopwire.shared.contract import redaction
from loopwire.shared.observability import tracing
from loopwire.shared.observability.tracing import setup as tracing_setup

pytestmark = pytest.mark.unit

FAKE_KEY = "sk-ant-api03-Zx9yFAKEfakeFAKE_0123456789-abcdefABCDEF"


def _everything_recorded(exporter: InMemorySpanExporter) -> str:
    """Every string a backend would see: names, attributes, events, status."""
    parts: list[str] = []
    for span in exporter.get_finished_spans():
        parts.append(span.name)
        parts.append(str(span.status.description))
        parts += [f"{k}={v}" for k, v in span.attributes.items()]
        for event in span.events:
            parts.append(event.name)
            parts += [f"{k}={v}" for k, v in event.attributes.items()]
    return "\n".join(parts)


def test_chat_span_has_genai_attributes(spans: InMemorySpanExporter) -> None:
    with tracing.chat_span("claude-sonnet-4-5", conversation_id="s1", max_tokens=1024,
                             temperature=0.2) as span:
        tracing.record_chat_response(
            span, response_model="claude-sonnet-4-5-20250929", response_id="msg_01",
            finish_reasons=["tool_use"], input_tokens=100, output_tokens=40,
            cache_read_input_tokens=900, cache_creation_input_tokens=5, time_to_first_chunk_s=0.31)

    [chat] = spans.get_finished_spans()
    assert chat.name == "chat claude-sonnet-4-5"
    assert chat.kind is SpanKind.CLIENT
    a = chat.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert a["gen_ai.request.max_tokens"] == 1024
    assert a["gen_ai.request.temperature"] == 0.2
    assert a["gen_ai.conversation.id"] == "s1"
    assert a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert a["gen_ai.response.id"] == "msg_01"
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("tool_use",)
    # Anthropic reports cache reads and writes apart from input_tokens; the GenAI
    # convention's input tokens are all three.
    assert a["gen_ai.usage.input_tokens"] == 1005
    assert a["gen_ai.usage.output_tokens"] == 40
    assert a["gen_ai.usage.cache_read.input_tokens"] == 900
    # Content is opt-in: none recorded by default.
    assert not any(k in a for k in ("gen_ai.input.messages", "gen_ai.system_instructions"))


def test_agent_and_tool_spans_nest(spans: InMemorySpanExporter) -> None:
    with tracing.invoke_agent_span("agentic", "s1", run_id="r1") as agent:
        with tracing.execute_tool_span("add", "toolu_01", arguments={"a": 1}) as tool:
            tracing.record_tool_result(tool, "3")
        with tracing.execute_tool_span("boom", "toolu_02") as tool:
            tracing.record_tool_result(tool, "nope", is_error=True)

    finished = {s.name: s for s in spans.get_finished_spans()}
    agent_span = finished["invoke_agent agentic"]
    assert agent_span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent_span.attributes["gen_ai.agent.name"] == "agentic"
    assert agent_span.attributes["gen_ai.conversation.id"] == "s1"
    assert agent_span.attributes["loopwire.run_id"] == "r1"
    add = finished["execute_tool add"]
    assert add.attributes["gen_ai.tool.name"] == "add"
    assert add.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert add.attributes["gen_ai.operation.name"] == "execute_tool"
    assert "gen_ai.tool.call.arguments" not in add.attributes
    assert add.parent.span_id == agent.get_span_context().span_id
    assert add.context.trace_id == agent_span.context.trace_id
    assert finished["execute_tool boom"].status.status_code is StatusCode.ERROR


def test_traceparent_continues_the_trace_elsewhere(spans: InMemorySpanExporter) -> None:
    # "router": opens the run's span and puts its context in the envelope.
    with tracing.invoke_agent_span("agentic", "s1"):
        carrier = tracing.inject_context()
    assert set(carrier) >= {"traceparent"}
    assert tracing.inject_context() == {}  # outside any span there is nothing to send

    # "llm": another task, no shared context but the carrier (as after a NATS hop).
    async def remote() -> None:
        with tracing.chat_span("claude-haiku-4-5", parent=carrier):
            pass

    asyncio.run(remote())
    by_name = {s.name: s for s in spans.get_finished_spans()}
    agent, chat = by_name["invoke_agent agentic"], by_name["chat claude-haiku-4-5"]
    assert chat.context.trace_id == agent.context.trace_id
    assert chat.parent.span_id == agent.context.span_id
    assert carrier["traceparent"].split("-")[1] == format(agent.context.trace_id, "032x")


def test_trace_id_carries_on_without_any_provider() -> None:
    """Export off: spans do not record, but an incoming traceparent is passed along."""
    tracing.set_tracer_provider(None)
    incoming = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    with tracing.chat_span("m", parent=incoming) as span:
        assert not span.is_recording()
        assert tracing.current_trace_id() == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert tracing.inject_context()["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        tracing.add_span_event("loop.detected", detection="repeat")  # a no-op, no error
    assert tracing.current_trace_id() is None


def test_without_a_provider_nested_spans_restore_the_context_even_on_errors() -> None:
    tracing.set_tracer_provider(None)
    outer = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    inner = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with tracing.chat_span("m", parent=outer):
        with pytest.raises(RuntimeError), tracing.chat_span("m", parent=inner):
            assert tracing.current_trace_id() == "0af7651916cd43dd8448eb211c80319c"
            raise RuntimeError("boom")
        assert tracing.current_trace_id() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.current_trace_id() is None


def test_extracted_contexts_are_reused_per_w3c_fields_and_other_propagators_are_honoured() -> None:
    from opentelemetry import propagate
    from opentelemetry.propagators.textmap import DefaultGetter, TextMapPropagator

    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    first = tracing.extract_context({"traceparent": parent, "Nats-Msg-Id": "a"})
    assert tracing.extract_context({"traceparent": parent, "Nats-Msg-Id": "b"}) is first  # other headers: same
    assert tracing.extract_context({}) is not first

    class B3Ish(TextMapPropagator):  # reads a header the W3C ones do not
        def extract(self, carrier, context=None, getter=DefaultGetter()):  # type: ignore[no-untyped-def]
            seen.append(dict(carrier))
            return context or Context()

        def inject(self, carrier, context=None, setter=None):  # type: ignore[no-untyped-def]
            return None

        @property
        def fields(self) -> set[str]:
            return {"x-b3-traceid"}

    seen: list[dict[str, str]] = []
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(B3Ish())
    try:
        tracing.extract_context({"x-b3-traceid": "1"})
        tracing.extract_context({"x-b3-traceid": "2"})
    finally:
        propagate.set_global_textmap(before)
    assert seen == [{"x-b3-traceid": "1"}, {"x-b3-traceid": "2"}]  # each parsed, none kept


def test_fake_key_never_recorded(spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    tracing.set_capture_content(True)  # the spans fixture puts it back
    messages = [{"role": "user", "content": f"my key is {FAKE_KEY}, use it"}]
    with pytest.raises(RuntimeError):
        with tracing.invoke_agent_span("agentic", "s1"):
            with tracing.chat_span("claude-sonnet-4-5", system=f"api_key={FAKE_KEY}",
                                     messages=messages) as chat:
                tracing.record_chat_response(
                    chat, response_id="msg_1", input_tokens=1, output_tokens=1,
                    output_messages=[{"role": "assistant", "content": f"echo {FAKE_KEY}"}])
            tracing.add_span_event("model.fallback", from_model="a", to_model="b",
                                     reason=f"401 for Bearer {FAKE_KEY}", detail={"x-api-key": FAKE_KEY})
            with tracing.execute_tool_span("http", "toolu_1",
                                             arguments={"headers": {"Authorization": f"Bearer {FAKE_KEY}"}}) as t:
                tracing.record_tool_result(t, f"token={FAKE_KEY}")
            raise RuntimeError(f"upstream rejected {FAKE_KEY}")

    recorded = _everything_recorded(spans)
    assert FAKE_KEY not in recorded
    assert "Zx9yFAKEfake" not in recorded  # not even a fragment
    # ...and the content itself was recorded (capture on), with the key masked.
    chat = next(s for s in spans.get_finished_spans() if s.name.startswith("chat"))
    assert "use it" in chat.attributes["gen_ai.input.messages"]
    assert "sk-ant-***" in chat.attributes["gen_ai.input.messages"]
    assert "echo" in chat.attributes["gen_ai.output.messages"]
    agent = next(s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert agent.status.status_code is StatusCode.ERROR
    assert [e.name for e in agent.events] == ["model.fallback", "exception"]


def test_redacting_exporter_masks_attributes_set_by_hand() -> None:
    inner = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(tracing.RedactingSpanExporter(inner)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("raw") as span:
        span.set_attribute("http.request.header.authorization", f"Bearer {FAKE_KEY}")
        span.set_attribute("note", ["ok", FAKE_KEY])
        span.add_event("e", {"why": FAKE_KEY})
    provider.shutdown()
    assert FAKE_KEY not in _everything_recorded(inner)
    [raw] = inner.get_finished_spans()
    assert raw.attributes["http.request.header.authorization"] == "Bearer ***"


@pytest.mark.parametrize(("text", "expected"), [
    (f"key {FAKE_KEY} end", "key sk-ant-*** end"),
    ("Authorization: Bearer abc.def-ghi", "Authorization: Bearer ***"),
    ("GET /x?api_key=12345&q=1", "GET /x?api_key=***&q=1"),
    ('{"password": "hunter2", "input_tokens": 5}', '{"password": "***", "input_tokens": 5}'),
    ("redis://default:s3cr3t@redis:6379/0", "redis://default:***@redis:6379/0"),
    ("max_tokens=4096 output_tokens: 12", "max_tokens=4096 output_tokens: 12"),
])
def test_redact_strings(text: str, expected: str) -> None:
    assert redaction.redact(text) == expected


def test_redact_structures_by_key() -> None:
    value = {"api_key": "abc", "input_tokens": 3, "nested": [{"Authorization": "xyz"}], "t": FAKE_KEY}
    assert redaction.redact(value) == {"api_key": "***", "input_tokens": 3,
                                       "nested": [{"Authorization": "***"}], "t": "sk-ant-***"}


def test_registered_literal_secret_is_masked() -> None:
    redaction.register_secret("correct-horse-battery")
    assert redaction.redact("nats pass is correct-horse-battery!") == "nats pass is ***!"


def test_setup_tracing_is_off_without_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.export_requested() is False
    assert tracing.setup_tracing("loopwire-test") is False


def test_missing_otlp_package_warns_and_stays_off(monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    # None in sys.modules makes the import fail even where the extra is installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    with caplog.at_level(logging.WARNING, logger="loopwire.telemetry"):
        assert tracing_setup._make_exporter("otlp") is None
    assert "opentelemetry-exporter-otlp-proto-http" in caplog.text


def test_setup_tracing_exports_when_asked() -> None:
    """A real process with OTEL_TRACES_EXPORTER=console: a provider is installed, the span is
    exported with our service name, and the fake key is masked on the way out."""
    code = f"""
from loopwire.shared.observability import tracing
assert tracing.setup_tracing("loopwire-llm") is True
assert tracing.setup_tracing("loopwire-router") is True   # first call wins, no error
with tracing.chat_span("claude-sonnet-4-5") as span:
    span.set_attribute("raw", "Bearer {FAKE_KEY}")
tracing.shutdown_tracing()
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"name": "chat claude-sonnet-4-5"' in out.stdout
    assert '"service.name": "loopwire-llm"' in out.stdout
    assert "Bearer ***" in out.stdout
    assert FAKE_KEY not in out.stdout
