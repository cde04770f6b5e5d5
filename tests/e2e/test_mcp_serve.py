"""`loopwire mcp` driven by the official MCP SDK's client, over stdio (the client starts
the command, as Claude Code does) and over streamable HTTP (`--http PORT`): it lists a tool
served by a `nats.micro` provider and calls it through the tools service (the provider
gets the call with loopwire's headers, the session gets its events); an unknown tool and a
bad input are MCP errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from nats import micro
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from loopwire.testing.servers import free_port, wait_port

from .conftest import ToolProvider, wait_for_tools
from .events import query

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def mcp_env(system: LoopwireContainer) -> dict[str, str]:
    return {"LOOPWIRE_NATS_URL": system.get_nats_url(), "LOOPWIRE_SUBJECT_PREFIX": system.prefix,
            "LOOPWIRE_LOG_LEVEL": "WARNING"}


@contextlib.asynccontextmanager
async def over_stdio(system: LoopwireContainer) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "loopwire.cli", "mcp"],
                                   env=mcp_env(system))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, client_info=types.Implementation(name="e2e-client", version="1")) as s:
            await s.initialize()
            yield s


@contextlib.contextmanager
def http_process(system: LoopwireContainer) -> Iterator[int]:
    """`loopwire mcp --http PORT` as a process; yields the port once it listens."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "loopwire.cli", "mcp", "--http", str(port)],
                            env={**os.environ, **mcp_env(system)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=30, proc=proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@contextlib.asynccontextmanager
async def over_http(system: LoopwireContainer) -> AsyncIterator[ClientSession]:
    with http_process(system) as port:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0)) as http:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write,
                                         client_info=types.Implementation(name="e2e-client", version="1")) as s:
                    await s.initialize()
                    yield s


async def tools_listed(mcp: ClientSession, name: str, timeout: float = 15.0) -> dict[str, types.Tool]:
    """`tools/list` once `name` is in it: the catalog holds a NATS provider's tool while
    discovery keeps seeing it, and a round late under load can leave it out for a moment."""
    async with asyncio.timeout(timeout):
        while True:
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            if name in listed:
                return listed
            await asyncio.sleep(0.2)


TRANSPORTS = {"stdio": over_stdio, "http": over_http}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_an_mcp_client_lists_and_calls_a_nats_micro_tool(system: LoopwireContainer, nc: NatsClient,
                                                               tool_provider: ToolProvider, transport: str) -> None:
    await wait_for_tools(nc, {"add"})
    async with TRANSPORTS[transport](system) as mcp:
        listed = await tools_listed(mcp, "add")
        assert listed["add"].description == "Add two numbers."
        assert listed["add"].input_schema["required"] == ["a", "b"]

        result = await mcp.call_tool("add", {"a": 2, "b": 3})
        assert result.is_error is False
        assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["5"]

        name, body, headers = tool_provider.calls[-1]
        assert (name, body) == ("add", {"a": 2, "b": 3})
        session = headers["Loopwire-Session-Id"]
        assert session.startswith("mcp-e2e-client-")
        events = (await query(nc, "transcript.get", {"session_id": session}))["events"]
        assert [(e["kind"], e["name"]) for e in events][-2:] == [("tool.call", "add"), ("tool.result", "add")]
        assert events[-1]["content"] == "5" and events[-1]["tool_use_id"] == headers["Loopwire-Tool-Use-Id"]

        named = await mcp.call_tool("add", {"a": 1, "b": 1}, meta={"loopwire/session_id": "e2e-mcp-named"})
        assert named.is_error is False
        assert tool_provider.calls[-1][2]["Loopwire-Session-Id"] == "e2e-mcp-named"

        calls_before = len(tool_provider.calls)
        with pytest.raises(MCPError) as unknown:
            await mcp.call_tool("no_such_tool", {})
        assert unknown.value.error.code == types.INVALID_PARAMS
        assert "unknown tool: no_such_tool" in unknown.value.error.message

        with pytest.raises(MCPError) as bad:
            await mcp.call_tool("add", {"a": "two", "b": 3})
        assert bad.value.error.code == types.INVALID_PARAMS
        assert "invalid input for tool add" in bad.value.error.message
        assert len(tool_provider.calls) == calls_before, "refused calls never reached the provider"


async def test_a_tool_that_fails_is_an_is_error_result(system: LoopwireContainer, nc: NatsClient) -> None:
    svc = await micro.add_service(nc, name="e2e-failing", version="1.0.0")

    async def broken(req: micro.Request) -> None:
        await req.respond_error("503", "the backend is down")

    await svc.add_endpoint(name="broken", handler=broken, metadata={
        "loopwire.tool": "broken", "description": "Always fails.", "input_schema": json.dumps({"type": "object"})})
    try:
        await wait_for_tools(nc, {"broken"})
        async with over_stdio(system) as mcp:
            result = await mcp.call_tool("broken", {})
        assert result.is_error is True  # it ran and failed: a result, not a protocol error
        assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [
            "the backend is down (code 503)"]
    finally:
        await svc.stop()
