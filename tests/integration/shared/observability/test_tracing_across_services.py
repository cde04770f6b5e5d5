"""One trace per run across router, llm and tools, with the GenAI attributes, and no
secret in any span: the five services in this process, real NATS and Redis, the llm
service on the real Anthropic SDK against the local Messages API server."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.client import LoopwireClient
from loopwire.launcher import SERVICE_NAMES, start_services
from loopwire.settings import Settings
from loopwire.testing import ServerHandle
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.integration

FAKE_KEY = "sk-ant-api03-" + "Q" * 40 + "-notreal"


async def test_one_trace_spans_router_llm_and_tools(
        spans: InMemorySpanExporter, nats_server: ServerHandle, redis_server: ServerHandle, prefix: str,
        redis_client: object, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        fake.script("*", [
            {"text": "Adding.", "tool_use": [{"name": "add_numbers", "input": {"a": 1, "b": 2}}]},
            {"text": "It is 3."},
        ])
        settings = Settings(nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix=prefix,
                            metrics_port=0, tool_modules=["tests.tracing_tools"], llm_provider="anthropic",
                            gc_thresholds="", gc_freeze=False)  # leave the test process's collector alone
        running = await start_services(SERVICE_NAMES, settings)
        try:
            lw = await LoopwireClient.connect(nats_server.url, prefix)
            ended = await lw.run("trace-1", {"input": f"add 1 and 2; my key is {FAKE_KEY}",
                                             "tools": ["add_numbers"]}, timeout=30)
            await lw.close()
        finally:
            await running.stop()
    assert ended["status"] == "completed"

    finished = spans.get_finished_spans()
    by_name = {s.name: s for s in finished}
    assert {"invoke_agent agentic", "chat claude-sonnet-4-5", "execute_tool add_numbers"} <= set(by_name)
    root = by_name["invoke_agent agentic"]
    assert root.parent is None
    assert {s.context.trace_id for s in finished} == {root.context.trace_id}, "one trace for the whole run"
    chats = [s for s in finished if s.name.startswith("chat ")]
    assert len(chats) == 2 and all(s.parent.span_id == root.context.span_id for s in chats)

    chat = chats[0].attributes
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.provider.name"] == "anthropic"
    assert chat["gen_ai.request.model"] == "claude-sonnet-4-5" and chat["gen_ai.response.model"]
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0
    assert tuple(chat["gen_ai.response.finish_reasons"]) == ("tool_use",)
    tool = by_name["execute_tool add_numbers"].attributes
    assert tool["gen_ai.tool.name"] == "add_numbers" and tool["gen_ai.tool.call.id"].startswith("toolu_")
    assert root.attributes["gen_ai.conversation.id"] == "trace-1"
    assert root.attributes["loopwire.run.status"] == "completed"
    assert root.start_time < chats[0].start_time and root.end_time >= chats[-1].end_time

    dumped = json.dumps([{"attrs": dict(s.attributes or {}), "events": [dict(e.attributes or {}) for e in s.events]}
                         for s in finished], default=str)
    assert FAKE_KEY not in dumped and "Q" * 40 not in dumped, "no secret in any span"
