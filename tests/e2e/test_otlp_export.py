"""Traces out of the box: with only OTEL_EXPORTER_OTLP_ENDPOINT set, loopwire exports
over OTLP/HTTP to a real receiver (tests/otlp_receiver.py decodes the protobuf): one
trace per run holding its `invoke_agent`, `chat` and `execute_tool` spans, and the NATS
hops as messaging spans (FastStream's NatsTelemetryMiddleware) in that same trace. In
`loopwire up` a run's hops are in-process calls under its chain's root message, which is
the hop on the wire; in the deployed layout every hop is."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic
from tests.otlp_receiver import OtlpReceiver

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module", params=["up", "split"])
def traced_system(request: pytest.FixtureRequest, fake_anthropic: FakeAnthropic,
                  otlp: OtlpReceiver) -> Iterator[LoopwireContainer]:
    # Nothing else asks for export: the endpoint alone turns it on. A short batch delay
    # gets the spans out while the test waits.
    with started_system(fake_anthropic, layout=request.param, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
                        OTEL_BSP_SCHEDULE_DELAY="200") as lw:
        lw.layout_name = request.param  # type: ignore[attr-defined]
        yield lw


def run_spans(spans: list[dict[str, Any]], sid: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The run's root span (invoke_agent) and every span of its trace, once exported."""
    roots = [s for s in spans if s["name"].startswith("invoke_agent ")
             and s["attributes"].get("gen_ai.conversation.id") == sid]
    if not roots:
        return None
    trace = [s for s in spans if s["trace_id"] == roots[0]["trace_id"]]
    return roots[0], trace


@pytest.mark.timeout(90)
async def test_each_run_is_one_exported_trace_with_genai_and_messaging_spans(
        traced_system: LoopwireContainer, fake: FakeAnthropic, otlp: OtlpReceiver) -> None:
    sids = [f"e2e-otlp-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    async with connected(traced_system) as nc:
        _, svc = await serve_tools(nc)
        try:
            await wait_for_tools(nc, {"add"})
            for sid in sids:
                fake.script("*", [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 3}}]},
                                  {"text": "It is 5.", "stop_reason": "end_turn"}])
                async with SessionEvents(nc, sid) as ev:
                    await ev.publish("start", {"input": "add 2 and 3", "tools": ["add"]})
                    ended = await ev.wait_for("run.ended", timeout=30)
                assert ended["status"] == "completed", ended
        finally:
            await svc.stop()

    def complete(spans: list[dict[str, Any]]) -> bool:
        """Every process has exported what the assertions below look for (each exports
        on its own schedule): counting the hops' spans is not enough, the router's two
        results can make up the number before the memory's span has come."""
        found = [run_spans(spans, sid) for sid in sids]
        return all(f is not None and [s["name"].split()[0] for s in f[1]].count("chat") >= 2
                   and any(s["name"] == "execute_tool add" for s in f[1])
                   and all(any(s["kind"] == "CONSUMER" and hop in s["name"] for s in f[1]) for hop in hops_seen)
                   for f in found)

    # The deployed layout: each of the run's four kinds of hop, at least once.
    hops_seen = ((".work.memory.assemble", ".work.llm.generate", ".work.tools.execute", ".direct.router.")
                 if traced_system.layout_name == "split" else (".work.memory.assemble",))  # type: ignore[attr-defined]
    spans = otlp.wait_for(complete, timeout=40)
    traces = set()
    for sid in sids:
        found = run_spans(spans, sid)
        assert found is not None
        root, trace = found
        traces.add(root["trace_id"])
        assert root["parent_span_id"] is None and root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert root["attributes"]["loopwire.run.status"] == "completed"
        assert [s["name"] for s in trace].count(root["name"]) == 1, "one invoke_agent span per run"

        chats = [s for s in trace if s["name"].startswith("chat ")]
        assert len(chats) == 2 and all(s["kind"] == "CLIENT" for s in chats)
        assert {s["attributes"]["gen_ai.provider.name"] for s in chats} == {"anthropic"}
        assert all(s["attributes"]["gen_ai.conversation.id"] == sid for s in chats)
        tools = [s for s in trace if s["name"] == "execute_tool add"]
        assert len(tools) == 1 and tools[0]["attributes"]["gen_ai.tool.name"] == "add"
        # Every span of a run hangs under that run's root (no span of another run here).
        assert all(s["attributes"].get("gen_ai.conversation.id", sid) == sid for s in trace)

        hops = [s for s in trace if s["kind"] == "CONSUMER" and s["attributes"].get("messaging.system") == "nats"]
        subjects = {s["name"].removesuffix(" process") for s in hops}  # "<subject> process"
        assert any(subject.endswith(".work.memory.assemble") for subject in subjects), subjects
        if traced_system.layout_name == "split":  # type: ignore[attr-defined]
            # Each service is its own process: every hop of the run crossed NATS, the work
            # through JetStream, the step results as requests to the router replica that
            # sent the work (docs/architecture.md, "Step results to the router that sent
            # the work"), each hop a span of its own.
            for hop in ("memory.assemble", "llm.generate", "tools.execute"):
                assert any(subject.endswith(f".work.{hop}") for subject in subjects), (hop, subjects)
            assert any(".direct.router." in subject for subject in subjects), ("router results", subjects)
    assert len(traces) == 2, "one trace per run"
