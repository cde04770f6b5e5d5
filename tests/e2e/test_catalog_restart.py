"""A tools process started again with other MCP servers offers its own tools at once: the
model is never offered, and no call goes to, a tool of a server that no running tools
process serves; and a tools process that starts never takes off the catalog what a live
sibling serves. Real MCP servers through the SDK (tests/fakes/mcp_server.py over stdio and
over streamable HTTP), the discovery interval at its default so the catalog's max age (12 s)
outlasts a restart."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.client import LoopwireClient
from loopwire.testing import LoopwireContainer
from loopwire.testing.processes import LoopwireProcess
from tests.fakes.anthropic_server import FakeAnthropic
from tests.mcp_helpers import http_server, stdio_server

from .conftest import connected, started_system, wait_for_tools

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SLOW_DISCOVERY = {"LOOPWIRE_DISCOVERY_INTERVAL_S": "2"}


async def listed(nc: NatsClient) -> set[str]:
    reply = await nc.request("loopwire.api.tools.list", b"{}", timeout=5)
    return {t["name"] for t in json.loads(reply.data)["tools"]}


def echo_whatever_is_offered(offered: list[list[str]]) -> Any:
    """The model calls the first `*__echo` tool it is offered (by name, as a model that
    asks for "echo" would), then says what came back."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        names = sorted(t["name"] for t in body.get("tools") or [])
        offered.append(names)
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            result = next(b for b in last if b.get("type") == "tool_result")["content"]
            text = result if isinstance(result, str) else "".join(b.get("text", "") for b in result)
            return {"text": f"The tool said: {text}"}
        echo = next(n for n in names if n.endswith("__echo"))
        return {"text": "Echoing.", "tool_use": [{"name": echo, "input": {"text": "hi"}}]}

    return respond


async def run_echo(nc: NatsClient, fake: FakeAnthropic, sid: str) -> tuple[dict[str, Any], list[list[str]]]:
    offered: list[list[str]] = []
    fake.responder = echo_whatever_is_offered(offered)
    async with LoopwireClient(nc) as lw:
        ended = await lw.run(sid, {"input": "echo hi"}, timeout=60)
    return ended, offered


async def test_up_started_again_with_another_mcp_server_offers_only_its_own_tools(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic, LOOPWIRE_MCP_SERVERS=json.dumps({"calc": stdio_server()}),
                        **SLOW_DISCOVERY) as system:
        async with connected(system) as nc:
            await wait_for_tools(nc, {"calc__echo"})
        assert system.terminate() == 0  # a graceful stop
        with http_server() as url:
            system.env["LOOPWIRE_MCP_SERVERS"] = json.dumps({"calchttp": {"url": url}})
            system.start_loopwire()
            stopped_and_started = time.monotonic()
            async with connected(system) as nc:
                names = await listed(nc)
                assert "calchttp__echo" in names and not {n for n in names if n.startswith("calc__")}, names
                ended, offered = await run_echo(nc, fake, "restart-up")
            assert time.monotonic() - stopped_and_started < 12, "within the catalog's max age"
    assert_served_by_the_live_server(ended, offered)


async def test_a_tools_replica_killed_and_started_with_another_server_leaves_its_siblings_tools(
        fake_anthropic: FakeAnthropic, fake: FakeAnthropic) -> None:
    with started_system(fake_anthropic, layout="split", LOOPWIRE_MCP_SERVERS=json.dumps({"calc": stdio_server()}),
                        **SLOW_DISCOVERY) as system, http_server() as url:
        async with connected(system) as nc:
            await wait_for_tools(nc, {"calc__echo"})
            sibling = start_sibling(system, {"calchttp": {"url": url}, "sib": stdio_server()})
            try:
                await wait_for_tools(nc, {"calchttp__echo", "sib__echo"})
                assert "calc__echo" in await listed(nc), "a replica starting keeps what a live sibling serves"

                system.kill_service("tools")  # kill -9: no withdraw
                system.env["LOOPWIRE_MCP_SERVERS"] = json.dumps({"calchttp": {"url": url}})
                system.start_loopwire()
                names = await listed(nc)
                assert {"calchttp__echo", "sib__echo"} <= names, names
                assert not {n for n in names if n.startswith("calc__")}, names
                ended, offered = await run_echo(nc, fake, "restart-split")
            finally:
                sibling.stop()
    assert_served_by_the_live_server(ended, offered)


def start_sibling(system: LoopwireContainer, servers: dict[str, Any]) -> LoopwireProcess:
    """Another `loopwire serve tools` on the same NATS and Redis, with MCP servers of its own."""
    sibling = LoopwireProcess("serve tools")
    sibling.launch({**system.process_env(), "LOOPWIRE_MCP_SERVERS": json.dumps(servers)})
    sibling.wait_ready(time.monotonic() + 60)
    return sibling


def assert_served_by_the_live_server(ended: dict[str, Any], offered: list[list[str]]) -> None:
    assert offered and all(not any(n.startswith("calc__") for n in names) for names in offered), offered
    assert ended["status"] == "completed", ended
    assert ended["final_text"] == "The tool said: echo: hi", ended
