"""MCP servers as tool providers, end to end through the public contract, in the deployed
layout (each service its own `loopwire serve` process, two routers): the test MCP server
(tests/fakes/mcp_server.py, written with the SDK) over stdio as a child of `loopwire serve
tools` and over streamable HTTP as a process of its own, and, where Node is there,
`@modelcontextprotocol/server-everything` from npm over stdio. The model is the real
Anthropic SDK against tests/fakes/anthropic_server.py, whose recorded requests show what
the model was offered and what came back to it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic
from tests.mcp_helpers import ROOT, http_server, stdio_server

from .conftest import E2E_ENV, connected, started_system, wait_for_tools
from .events import SessionEvents

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

EVERYTHING_BIN = ROOT / "tests" / "node" / "node_modules" / ".bin" / "mcp-server-everything"


def everything_server() -> dict[str, Any] | None:
    """server-everything from tests/node (`make test` runs `npm ci` there), else through
    `npx -y` from the npm cache or registry; None without Node."""
    if EVERYTHING_BIN.exists() and shutil.which("node"):
        return {"command": str(EVERYTHING_BIN), "args": ["stdio"]}
    if shutil.which("npx"):
        return {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything", "stdio"]}
    return None


class McpSystem:
    def __init__(self, lw: LoopwireContainer, pid_file: Path, has_everything: bool) -> None:
        self.lw = lw
        self.pid_file = pid_file
        self.has_everything = has_everything

    def pids(self) -> list[int]:
        return [int(p) for p in self.pid_file.read_text().split()] if self.pid_file.exists() else []


@pytest.fixture(scope="module")
def mcp_system(fake_anthropic: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSystem]:
    pid_file = tmp_path_factory.mktemp("mcp") / "stdio.pids"
    servers: dict[str, Any] = {"local": stdio_server(pid_file)}
    everything = everything_server()
    if everything is not None:
        servers["everything"] = everything
    with http_server() as url:
        servers["remote"] = {"url": url}
        with started_system(fake_anthropic, layout="split", LOOPWIRE_MCP_SERVERS=json.dumps(servers)) as lw:
            yield McpSystem(lw, pid_file, everything is not None)


@pytest.fixture
async def mnc(mcp_system: McpSystem) -> AsyncIterator[NatsClient]:
    async with connected(mcp_system.lw) as client:
        yield client


async def run_with(nc: NatsClient, fake: FakeAnthropic, tool: str, tool_input: dict[str, Any],
                   final: str = "Done.", timeout: float = 60) -> SessionEvents:
    """One run whose model calls `tool` once and then answers `final`."""
    await wait_for_tools(nc, {tool})
    fake.script("*", [{"text": "Calling it.", "tool_use": [{"name": tool, "input": tool_input}]},
                      {"text": final, "stop_reason": "end_turn"}])
    sid = f"e2e-mcp-{uuid.uuid4().hex[:8]}"
    async with SessionEvents(nc, sid) as ev:
        await ev.publish("start", {"v": 1, "input": f"Use {tool}.", "tools": [tool]})
        ended = await ev.wait_for("run.ended", timeout=timeout)
    assert ended["status"] == "completed", ended
    ev.check_bodies()
    return ev


def tool_result_seen_by_model(fake: FakeAnthropic) -> dict[str, Any]:
    """The tool_result block of the model's second request."""
    second = fake.message_requests[1]
    (block,) = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    return block


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


async def direct(nc: NatsClient, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request("loopwire.rpc.tools.call", json.dumps(
        {"name": name, "input": tool_input, "session_id": "e2e-mcp-direct"}).encode(), timeout=30)
    return json.loads(reply.data)


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_run_calls_an_mcp_tool_and_the_model_gets_its_result(mnc: NatsClient, fake: FakeAnthropic,
                                                                     server: str) -> None:
    ev = await run_with(mnc, fake, f"{server}__echo", {"text": "hello"})
    (call,) = ev.of("tool.call")
    (result,) = ev.of("tool.result")
    assert call["name"] == f"{server}__echo" and call["input"] == {"text": "hello"}
    assert result["content"] == "echo: hello" and result["is_error"] is False
    offered = {t["name"]: t for t in fake.message_requests[0]["tools"]}
    assert offered[f"{server}__echo"]["description"] == "Echo the text back, prefixed with 'echo: '."
    assert offered[f"{server}__echo"]["input_schema"]["required"] == ["text"]
    block = tool_result_seen_by_model(fake)
    assert block["tool_use_id"] == call["tool_use_id"] and block["content"] == "echo: hello"
    assert not block.get("is_error")


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_bad_input_is_refused_by_the_schema_before_the_call(mnc: NatsClient, fake: FakeAnthropic,
                                                                  server: str) -> None:
    before = (await direct(mnc, f"{server}__echo_count", {}))["content"]
    ev = await run_with(mnc, fake, f"{server}__echo", {"words": ["no", "text"]})
    (result,) = ev.of("tool.result")
    assert result["is_error"] is True and "'text' is a required property" in result["content"]
    block = tool_result_seen_by_model(fake)
    assert block["is_error"] is True and "invalid input for tool" in str(block["content"])
    assert (await direct(mnc, f"{server}__echo_count", {}))["content"] == before, "the server saw no call"


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_an_is_error_result_reaches_the_model_as_an_error(mnc: NatsClient, fake: FakeAnthropic,
                                                                server: str) -> None:
    ev = await run_with(mnc, fake, f"{server}__fail", {"reason": "the disk is full"})
    (result,) = ev.of("tool.result")
    assert result["is_error"] is True
    block = tool_result_seen_by_model(fake)
    assert block["is_error"] is True and "refused: the disk is full" in str(block["content"])


async def test_an_mcp_tool_waits_for_its_approval(mnc: NatsClient, fake: FakeAnthropic) -> None:
    await wait_for_tools(mnc, {"local__echo"})
    fake.script("*", [{"text": "Asking.", "tool_use": [{"name": "local__echo", "input": {"text": "approved"}}]},
                      {"text": "Done.", "stop_reason": "end_turn"}])
    sid = f"e2e-mcp-{uuid.uuid4().hex[:8]}"
    async with SessionEvents(mnc, sid) as ev:
        await ev.publish("start", {"v": 1, "input": "Echo, once approved.", "tools": ["local__echo"],
                                   "tool_permissions": {"local__echo": "approve"}})
        asked = await ev.wait_for("approval.requested", timeout=60)
        assert [c["name"] for c in asked["tool_calls"]] == ["local__echo"]
        assert not ev.of("tool.result"), "nothing runs before the decision"
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
        ended = await ev.wait_for("run.ended", timeout=60)
    assert ended["status"] == "completed"
    assert ev.of("tool.result")[0]["content"] == "echo: approved"


async def test_the_stdio_server_killed_mid_session_is_restarted(mcp_system: McpSystem, mnc: NatsClient,
                                                              fake: FakeAnthropic) -> None:
    ev = await run_with(mnc, fake, "local__whoami", {})
    first = int(ev.of("tool.result")[0]["content"])
    assert first == mcp_system.pids()[-1]
    (tools_process,) = mcp_system.lw.of_service("tools")
    assert tools_process.proc is not None and parent_of(first) == tools_process.proc.pid
    os.kill(first, signal.SIGKILL)
    for _ in range(300):  # the tools service notices at once and starts a new process
        if mcp_system.pids()[-1] != first:
            break
        await asyncio.sleep(0.05)
    fake.reset()
    ev = await run_with(mnc, fake, "local__whoami", {})
    (result,) = ev.of("tool.result")
    assert result["is_error"] is False and int(result["content"]) == mcp_system.pids()[-1] != first
    assert parent_of(int(result["content"])) == tools_process.proc.pid
    assert all(p.running for p in mcp_system.lw.processes), "no loopwire process died"


async def test_a_tool_added_at_run_time_becomes_callable(mnc: NatsClient, fake: FakeAnthropic) -> None:
    ev = await run_with(mnc, fake, "local__enable_extra", {})
    assert ev.of("tool.result")[0]["content"] == "extra enabled"
    fake.reset()
    ev = await run_with(mnc, fake, "local__extra", {"n": 4})  # waits for tools.list to show it
    assert ev.of("tool.result")[0]["content"] == "extra 8"
    offered = {t["name"]: t for t in fake.message_requests[0]["tools"]}
    assert offered["local__extra"]["description"] == "Double a number (added at run time)."


async def test_a_third_party_server_from_npm(mcp_system: McpSystem, mnc: NatsClient, fake: FakeAnthropic) -> None:
    if not mcp_system.has_everything:
        message = "no Node.js here: @modelcontextprotocol/server-everything cannot run (`make test-node-deps`)"
        if os.environ.get("CI"):  # as the agents' (tests/agent_binaries.py): no pass by skipping under CI
            pytest.fail(message)
        pytest.skip(message)
    ev = await run_with(mnc, fake, "everything__get-sum", {"a": 2, "b": 40})
    (result,) = ev.of("tool.result")
    assert result["is_error"] is False and "42" in result["content"]
    assert "42" in str(tool_result_seen_by_model(fake)["content"])
    fake.reset()
    ev = await run_with(mnc, fake, "everything__get-tiny-image", {})
    blocks = ev.of("tool.result")[0]["content"]
    assert any(b["type"] == "image" and b["source"]["media_type"] == "image/png" for b in blocks)
    seen = tool_result_seen_by_model(fake)["content"]
    assert any(b["type"] == "image" for b in seen), "the model got the image as an image block"


@pytest.mark.timeout(300)
def test_each_tools_replica_keeps_its_own_stdio_server(fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    """`loopwire up --workers 2`: two processes with a tools service each, so two server
    processes, one child of each; a run's call is served by one of them."""
    pid_file = tmp_path / "stdio.pids"
    servers = json.dumps({"local": stdio_server(pid_file)})
    # Each worker starts its own server process before it is ready: give a loaded machine time.
    env = {**E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url, "LOOPWIRE_MCP_SERVERS": servers}
    with LoopwireContainer(env=env, layout="workers", ready_timeout=150) as lw:
        pids = [int(p) for p in pid_file.read_text().split()]
        assert len(pids) == 2, pids
        parents = {parent_of(pid) for pid in pids}
        (worker0,) = lw.processes
        assert worker0.proc is not None and len(parents) == 2 and worker0.proc.pid in parents
        (worker1,) = parents - {worker0.proc.pid}
        assert parent_of(worker1) == worker0.proc.pid  # worker 1 is worker 0's child

        async def one_run() -> None:
            async with connected(lw) as nc:
                ev = await run_with(nc, fake_anthropic, "local__whoami", {}, timeout=150)
                assert int(ev.of("tool.result")[0]["content"]) in pids

        fake_anthropic.reset()
        try:
            asyncio.run(one_run())
        except BaseException:
            print(lw.logs()[-6000:])  # which process was stuck where
            raise
