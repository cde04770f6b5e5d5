"""MCP servers as tool providers, in the tools service on a real nats-server and
redis-server, with a real MCP server (tests/fakes/mcp_server.py, written with the SDK) over
stdio and over streamable HTTP: listing, calls through the executor and through
`rpc.tools.call`, validation before the call, `isError`, content mapping, a stdio server
killed and restarted, and `notifications/tools/list_changed`."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest
import pytest_asyncio
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient

from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.service_context import ServiceContext, build_context
from loopwire.shared.runtime.streams import ensure_streams
from loopwire.shared.stores.tool_catalog import catalog_max_age, read_catalog_entries
from loopwire.testing.servers import ServerHandle
from loopwire.tools.service import ToolsService
from tests.mcp_helpers import http_server, stdio_server

# One tools service and one pair of MCP servers for the module: starting a Python MCP
# server process is the slow part. Tests that change a server (kill it, add a tool) are
# written to hold whatever order they run in.
pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class Running:
    ctx: ServiceContext
    service: ToolsService
    nc: NatsClient
    pid_file: Path

    async def call(self, name: str, arguments: dict[str, Any], session: str = "mcp-test",
                   timeout: float = 20) -> dict[str, Any]:
        reply = await self.nc.request(self.ctx.subjects.tools_call, orjson.dumps(
            {"name": name, "input": arguments, "session_id": session}), timeout=timeout)
        return orjson.loads(reply.data)

    async def execute(self, name: str, arguments: dict[str, Any], tool_use_id: str) -> Any:
        assert self.service.executor is not None
        env = ExecuteTools(session_id="s1", run_id="r1", step_id=f"r1:{tool_use_id}",
                           calls=[ToolCall(tool_use_id=tool_use_id, name=name, input=arguments)])
        (item,) = await self.service.executor.execute(env)
        return item

    def server_pid(self) -> int:
        return int(self.pid_file.read_text().split()[-1])


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(nats_server: ServerHandle, redis_server: ServerHandle, http_url: str,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    pid_file = tmp_path_factory.mktemp("mcp") / "stdio.pid"
    prefix = f"lwt{uuid.uuid4().hex[:10]}"
    settings = Settings(subject_prefix=prefix, nats_url=nats_server.url, redis_url=redis_server.url,
                        discovery_interval_s=0.5, discovery_misses=2, ack_wait_s=2, tool_timeout_s=15,
                        mcp_servers={"local": stdio_server(pid_file),
                                     "remote": {"url": http_url, "timeout_s": 2}},
                        tool_policy={"local__fail": "deny", "local__pixel": "approve"})
    broker = NatsBroker(settings.nats_url)
    ctx = build_context(settings, broker)
    await broker.connect()
    ctx.attach_bus()
    await ensure_streams(ctx.bus.js, settings)
    service = ToolsService(ctx)
    service.register(broker)
    await broker.start()
    await ctx.consume()
    await service.start()
    nc = await nats.connect(nats_server.url)
    try:
        yield Running(ctx, service, nc, pid_file)
    finally:
        await nc.close()
        await service.stop()
        await ctx.stop_consuming(5)
        await broker.stop()
        await ctx.redis.aclose()


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_the_servers_tools_are_in_the_catalog_under_their_loopwire_names(running: Running,
                                                                               server: str) -> None:
    entries = await read_catalog_entries(running.ctx.redis, catalog_max_age(running.ctx.settings))
    echo = entries[f"{server}__echo"]
    assert echo.source == "mcp"
    assert echo.description == "Echo the text back, prefixed with 'echo: '."
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    assert echo.input_schema["required"] == ["text"]
    assert {f"{server}__fail", f"{server}__pixel", f"{server}__measure"} <= set(entries)
    assert f"{server}__extra" not in entries  # only after enable_extra


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_call_reaches_the_server_and_its_result_comes_back(running: Running, server: str) -> None:
    item = await running.execute(f"{server}__echo", {"text": "hi"}, "toolu_a")
    assert (item.content, item.is_error) == ("echo: hi", False)
    reply = await running.call(f"{server}__echo", {"text": "again"})
    assert reply["content"] == "echo: again" and reply["is_error"] is False


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_bad_input_is_refused_before_the_server_sees_it(running: Running, server: str) -> None:
    before = (await running.call(f"{server}__echo_count", {}))["content"]
    item = await running.execute(f"{server}__echo", {"txt": 1}, "toolu_bad")
    assert item.is_error
    assert "invalid input for tool" in item.content and "'text' is a required property" in item.content
    refused = await running.call(f"{server}__echo", {"text": 5})
    assert refused["error"]["code"] == "invalid_input"
    assert (await running.call(f"{server}__echo_count", {}))["content"] == before


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_an_is_error_result_is_an_error_result(running: Running, server: str) -> None:
    item = await running.execute(f"{server}__fail", {"reason": "no disk"}, "toolu_fail")  # a run's call
    assert item.is_error is True
    assert "refused: no disk" in item.content


async def test_a_call_is_counted_and_traced_as_any_tool_call(running: Running, spans: Any) -> None:
    def calls(outcome: str) -> float:
        return metrics.REGISTRY.get_sample_value(
            "loopwire_tool_calls_total", {"tool": "remote__echo", "outcome": outcome}) or 0.0

    ok, error = calls("ok"), calls("error")
    await running.execute("remote__echo", {"text": "traced"}, "toolu_tr")
    await running.execute("remote__echo", {"txt": "no"}, "toolu_tr2")
    assert (calls("ok"), calls("error")) == (ok + 1, error + 1)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool remote__echo"
               and s.attributes.get("gen_ai.tool.call.id") == "toolu_tr"]
    assert span.attributes["gen_ai.tool.name"] == "remote__echo"
    assert span.attributes["gen_ai.conversation.id"] == "s1"


async def test_a_servers_timeout_bounds_its_calls(running: Running) -> None:
    item = await running.execute("remote__sleep", {"seconds": 20}, "toolu_slow")
    assert item.is_error and item.content == "tool remote__sleep timed out after 2s"
    assert (await running.call("remote__echo", {"text": "still here"}))["content"] == "echo: still here"


async def test_images_and_structured_content_map_to_content_blocks(running: Running) -> None:
    pixel = await running.execute("local__pixel", {}, "toolu_px")
    assert pixel.content[0] == {"type": "text", "text": "a pixel"}
    image = pixel.content[1]
    assert image["type"] == "image" and image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png" and image["source"]["data"].startswith("iVBOR")
    measured = await running.execute("local__measure", {"word": "abc"}, "toolu_m")
    # The SDK repeats structured content as JSON text: the model gets it once.
    assert orjson.loads(measured.content) == {"length": 3, "upper": "ABC"}


async def test_a_direct_call_gets_events_on_its_session(running: Running) -> None:
    reply = await running.call("local__echo", {"text": "evented"}, session="mcp-client-7")
    events = await running.ctx.bus.events.read("mcp-client-7", 0, 10)
    kinds = [(e["kind"], e["name"], e["tool_use_id"]) for e in events]
    assert kinds == [("tool.call", "local__echo", reply["tool_use_id"]),
                     ("tool.result", "local__echo", reply["tool_use_id"])]
    assert events[1]["content"] == "echo: evented" and events[1]["is_error"] is False


async def test_a_call_carries_the_runs_ids_in_its_meta(running: Running) -> None:
    assert running.service.executor is not None
    env = ExecuteTools(session_id="s1", run_id="r1", step_id="r1:t9", user_id="user-42", workspace_id="ws-7",
                       calls=[ToolCall(tool_use_id="toolu_meta", name="local__meta", input={})])
    (item,) = await running.service.executor.execute(env)
    assert orjson.loads(item.content) == {"loopwire/session_id": "s1", "loopwire/tool_use_id": "toolu_meta",
                                          "loopwire/user_id": "user-42", "loopwire/workspace_id": "ws-7"}
    reply = await running.nc.request(running.ctx.subjects.tools_call, orjson.dumps(
        {"name": "remote__meta", "input": {}, "session_id": "mcp-meta", "user_id": "user-42",
         "workspace_id": "bad\nid"}), timeout=20)
    meta = orjson.loads(orjson.loads(reply.data)["content"])
    assert meta["loopwire/user_id"] == "user-42" and "loopwire/workspace_id" not in meta, \
        "a direct call's context fields too, each only when it can be a header"


async def test_unknown_tools_and_bad_requests_get_error_replies(running: Running) -> None:
    assert (await running.call("local__nope", {}))["error"]["code"] == "unknown_tool"
    reply = await running.nc.request(running.ctx.subjects.tools_call, b"not json", timeout=5)
    assert orjson.loads(reply.data)["error"]["code"] == "bad_request"
    bad_sid = await running.call("local__echo", {"text": "x"}, session="no spaces allowed")
    assert bad_sid["error"]["code"] == "bad_request"


async def test_the_operators_policy_holds_for_direct_calls(running: Running) -> None:
    before = await running.ctx.bus.events.read("mcp-policy", 0, 10)
    denied = await running.call("local__fail", {"reason": "x"}, session="mcp-policy")
    assert denied["error"]["code"] == "denied"
    needs = await running.call("local__pixel", {}, session="mcp-policy")
    assert needs["error"]["code"] == "approval_required"
    assert await running.ctx.bus.events.read("mcp-policy", 0, 10) == before == []


async def test_a_killed_stdio_server_is_restarted_and_the_next_call_works(running: Running) -> None:
    conn = next(c for c in running.service.mcp.connections if c.name == "local")  # type: ignore[union-attr]
    first = int((await running.call("local__whoami", {}))["content"])
    assert first == running.server_pid()
    connects = conn.connects
    os.kill(first, signal.SIGKILL)
    for _ in range(500):  # the stream's end is seen at once; the restart takes a moment
        if not conn.connected or conn.connects > connects:
            break
        await asyncio.sleep(0.01)
    reply = await running.call("local__whoami", {})  # waits for the restart
    assert reply["is_error"] is False, reply
    second = int(reply["content"])
    assert second != first and second == running.server_pid()
    assert conn.connects == connects + 1
    assert (await running.call("remote__echo", {"text": "unaffected"}))["content"] == "echo: unaffected"


async def test_a_call_in_flight_when_the_server_dies_gets_a_clear_error(running: Running) -> None:
    pid = running.server_pid()
    calling = asyncio.create_task(running.call("local__sleep", {"seconds": 30}))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    reply = await calling
    assert reply["is_error"] is True
    assert "connection to MCP server local broke during the call" in reply["content"]
    after = await running.call("local__whoami", {})
    assert after["is_error"] is False and int(after["content"]) != pid


async def test_a_tool_added_at_run_time_becomes_callable(running: Running) -> None:
    assert (await running.call("local__extra", {"n": 2}))["error"]["code"] == "unknown_tool"
    assert (await running.call("local__enable_extra", {}))["content"] == "extra enabled"
    deadline = time.monotonic() + 10
    entries: dict[str, Any] = {}
    while time.monotonic() < deadline:
        entries = await read_catalog_entries(running.ctx.redis, catalog_max_age(running.ctx.settings))
        if "local__extra" in entries:
            break
        await asyncio.sleep(0.05)
    assert entries["local__extra"].description == "Double a number (added at run time)."
    assert (await running.call("local__extra", {"n": 21}))["content"] == "extra 42"
