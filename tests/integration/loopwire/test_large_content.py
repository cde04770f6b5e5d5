"""A 5 MB tool result end to end: stored once, carried by reference (no NATS message near
max_payload, which the test server sets to 1 MB), and given whole to the model."""

from __future__ import annotations

import asyncio

import pytest

from loopwire.client import LoopwireClient
from loopwire.launcher import SERVICE_NAMES, start_services
from loopwire.settings import Settings
from loopwire.shared.contract import codec, keys
from loopwire.shared.stores.blobs import REF_KEY
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.testing import ServerHandle
from tests.fakes.anthropic_server import FakeAnthropic

FIVE_MB = 5 * 1024 * 1024


@pytest.mark.integration
async def test_five_megabyte_tool_result_end_to_end(
        nats_server: ServerHandle, redis_server: ServerHandle, prefix: str, redis_client: object,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        fake.script("*", [
            {"text": "Fetching.", "tool_use": [{"name": "big_text", "input": {"n": FIVE_MB}}]},
            {"text": "Got it all."},
            {"text": "Still here."},
        ])
        settings = Settings(nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix=prefix,
                            metrics_port=0, tool_modules=["tests.tracing_tools"], llm_provider="anthropic",
                            gc_thresholds="", gc_freeze=False)  # leave the test process's collector alone
        running = await start_services(SERVICE_NAMES, settings)
        events: list[dict] = []
        try:
            lw = await LoopwireClient.connect(nats_server.url, prefix)
            ended = await lw.run("big-1", {"input": "fetch the big text", "tools": ["big_text"]},
                                 on_event=events.append, timeout=60)
            await lw.publish("big-1", "message", {"content": "and now?"})
            async with asyncio.timeout(30):  # the follow-up runs a new turn with the same history
                while (session := await lw.session_get("big-1"))["turns"] < 3 or session["status"] != "idle":  # noqa: ASYNC110 - polling a remote query
                    await asyncio.sleep(0.05)
            await lw.close()
        finally:
            await running.stop()
        requests = fake.message_requests
    assert ended["status"] == "completed" and ended["final_text"] == "Got it all."
    tool_result = requests[1]["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result"
    text = "".join(b["text"] for b in tool_result["content"])
    assert len(text) == FIVE_MB and text.startswith("0123456789abcdef"), "the model got the whole result"
    assert all(REF_KEY not in b for b in tool_result["content"])

    (result_event,) = [e for e in events if e["kind"] == "tool.result"]
    assert REF_KEY in result_event["content"][0] and result_event["content"][0][REF_KEY]["bytes"] == FIVE_MB
    assert len(codec.dumps(result_event)) < 10_000
    stored = codec.dumps(session["messages"])
    assert len(stored) < 20_000, "the history holds the reference, not 5 MB"
    redis = connect_redis(redis_server.url)
    blobs = [k async for k in redis.scan_iter(keys.blob("*"))]
    await redis.aclose()
    assert len(blobs) == 1, "stored once, though two later requests carried it"
    third = requests[2]["messages"]
    assert len("".join(b.get("text", "") for b in third[2]["content"][0]["content"])) == FIVE_MB


