"""The codex and opencode executors with the agents' real CLIs (deploy/agents, `make
agents`) against the fake OpenAI API (tests/fakes/openai_server.py) and an MCP server of
the tests (tests/fakes/mcp_server.py over streamable HTTP, standing in for the llm
service's bridge): their events, usage and answer, an MCP tool and one of their own,
a tool kept from them, a second step that continues their session, and a cancel that
leaves none of their processes. The whole system (the bridge, a `nats.micro` tool):
tests/e2e/test_executor_codex.py and tests/e2e/test_executor_opencode.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.llm.executors.agent_process import alive, descendants
from loopwire.llm.executors.base import (
    AssistantMessage,
    Executor,
    ExecutorEvent,
    ExecutorRun,
    ExecutorTask,
    Finished,
    McpEndpoint,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)
from loopwire.llm.executors.codex import CodexExecutor
from loopwire.llm.executors.opencode import OpencodeExecutor
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.testing.servers import free_port
from tests.agent_binaries import CODEX, OPENCODE, needs
from tests.agent_processes import cmdline
from tests.fakes.openai_server import FakeOpenAI, tool_outputs
from tests.paths import REPO

pytestmark = pytest.mark.integration
needs_codex = needs(CODEX, "codex")
needs_opencode = needs(OPENCODE, "opencode")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_server", "--http", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    import socket

    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def agent_env(home: Path, **extra: str) -> dict[str, str]:
    """The agent's environment: this machine's, with a home of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWIRE_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".local/state"), **extra)
    env.pop("CODEX_HOME", None)
    env.pop("OPENCODE_DB", None)
    return env


def new_task(tmp_path: Path, profile: str, model: str, text: str, mcp_url: str, **over: Any) -> ExecutorTask:
    cwd = tmp_path / "workspace"
    cwd.mkdir(exist_ok=True)
    fields: dict[str, Any] = dict(
        session_id=f"s-{tmp_path.name}", run_id="r1", step_id="st1", turn=1, profile=profile, model=model,
        prompt=[{"type": "text", "text": text}], cwd=cwd, scratch=tmp_path, system="Answer briefly. LW-SYSTEM-NOTE",
        tools=[ToolSpec(name="echo", description="Echo the text back", input_schema={"type": "object"})],
        mcp=McpEndpoint(url=mcp_url, headers={"Authorization": "Bearer step-token"}))
    fields.update(over)
    return ExecutorTask(**fields)


async def run_step(executor: Executor, task: ExecutorTask, timeout: float) -> list[ExecutorEvent]:
    run = await executor.start(task)
    events: list[ExecutorEvent] = []
    try:
        async with asyncio.timeout(timeout):
            async for event in run.events():
                events.append(event)
    finally:
        await run.aclose()
    return events


def kinds(events: list[ExecutorEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


async def cancel_mid_command(executor: Executor, task: ExecutorTask, marker: Path, timeout: float) -> None:
    """Start the step, wait until the agent's command (which touches `marker`, then sleeps)
    runs, cancel it, and check that none of the agent's processes is left."""
    run = await executor.start(task)
    consumer = asyncio.create_task(_drain(run))
    try:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(marker.exists):
            assert time.monotonic() < deadline, "the agent's command did not start"
            assert not consumer.done(), consumer
            await asyncio.sleep(0.2)
        process = getattr(run, "process", None)
        assert process is not None and process.pid is not None
        tree = [process.pid, *descendants(process.pid)]
        assert any("sleep" in cmdline(p) for p in tree), [cmdline(p) for p in tree]
        await run.cancel()
        await asyncio.wait_for(consumer, 30)
        left = [p for p in tree if alive(p)]
        assert not left, [cmdline(p) for p in left]
    finally:
        consumer.cancel()
        await run.aclose()


async def _drain(run: ExecutorRun) -> None:
    async for _ in run.events():
        pass


# -- codex ----------------------------------------------------------------------------------
def codex_executor(tmp_path: Path, fake: FakeOpenAI) -> CodexExecutor:
    provider = (f'model_providers.fake={{name="fake", base_url="{fake.base_url}", env_key="FAKE_OPENAI_KEY", '
                'wire_api="responses", request_max_retries=0, stream_max_retries=0}')
    return CodexExecutor(Settings(executor_dir=str(tmp_path / "executor")),
                         [str(CODEX), "-c", "model_provider=fake", "-c", provider])


@needs_codex
@pytest.mark.timeout(300)
async def test_codex_answers_calls_tools_and_continues_its_thread(tmp_path: Path, fake: FakeOpenAI,
                                                                  mcp_url: str) -> None:
    model = f"codex-under-test-{tmp_path.name}"
    fake.script(model, [
        {"text": "Echoing first.", "tool_calls": [{"name": "echo", "namespace": "mcp__loopwire",
                                                   "arguments": {"text": "ping"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo made > made-by-codex.txt"}}]},
        {"text": "Done: echoed and wrote the file.", "usage": {"input_tokens": 1200, "output_tokens": 30}},
        {"text": "You asked me to echo ping."}])
    executor = codex_executor(tmp_path, fake)
    env = agent_env(tmp_path / "home", FAKE_OPENAI_KEY="not-a-real-key")
    task = new_task(tmp_path, "codex", model, "Echo ping, then write a file.", mcp_url, env=env,
                    permissions={"web_search": "deny"})
    events = await run_step(executor, task, 240)

    assert kinds(events) == ["SessionStarted", "TextDelta", "ToolCall", "ToolResult", "AssistantMessage",
                             "ToolCall", "ToolResult", "AssistantMessage", "TextDelta", "AssistantMessage",
                             "Finished"]
    echo_call, echo_result = events[2], events[3]
    assert isinstance(echo_call, ToolCall) and echo_call.loopwire_tool == "echo" and echo_call.input == {"text": "ping"}
    assert isinstance(echo_result, ToolResult) and echo_result.content == "echo: ping"
    shell = events[5]
    assert isinstance(shell, ToolCall) and shell.name == "exec_command" and shell.loopwire_tool is None
    assert (task.cwd / "made-by-codex.txt").read_text().strip() == "made"  # in the run's workspace
    finished = events[-1]
    assert isinstance(finished, Finished) and not finished.is_error
    assert finished.text == "Done: echoed and wrote the file." and finished.turns == 3
    assert finished.usage.input_tokens > 0 and finished.usage.output_tokens >= 30
    thread = finished.agent_session
    assert isinstance(events[0], SessionStarted) and thread == events[0].agent_session

    requests = [r for r in fake.responses_requests if r["model"] == model]
    assert len(requests) == 3
    offered = fake.tool_names(requests[0])
    assert "mcp__loopwire__echo" in offered and "exec_command" in offered and "web_search" not in offered
    assert "LW-SYSTEM-NOTE" in json.dumps(requests[0]["input"])
    assert tool_outputs(requests[1])[0]["output"].endswith('{"result":"echo: ping"}')

    # the next step continues Codex's own thread: the first exchange is in its request
    assert executor.session_reachable(thread or "", task.cwd)
    follow = dataclasses.replace(task, step_id="st2", resume=thread,
                                 prompt=[{"type": "text", "text": "What did I ask first?"}])
    second = await run_step(executor, follow, 180)
    done = second[-1]
    assert isinstance(done, Finished) and done.text == "You asked me to echo ping." and done.agent_session == thread
    # the step's own usage, not the thread's running total
    assert 0 < done.usage.input_tokens < finished.usage.input_tokens
    last = [r for r in fake.responses_requests if r["model"] == model][-1]
    history = json.dumps(last["input"])
    assert "Echo ping, then write a file." in history and "Done: echoed and wrote the file." in history
    ids = [e.tool_use_id for e in events + second if isinstance(e, ToolCall)]
    assert len(ids) == len(set(ids))


@needs_codex
@pytest.mark.timeout(300)
async def test_codex_denied_shell_is_not_offered_and_cancel_leaves_no_process(tmp_path: Path, fake: FakeOpenAI,
                                                                            mcp_url: str) -> None:
    model = f"codex-deny-{tmp_path.name}"
    fake.script(model, [{"text": "I cannot run commands here."}])
    executor = codex_executor(tmp_path, fake)
    env = agent_env(tmp_path / "home", FAKE_OPENAI_KEY="not-a-real-key")
    task = new_task(tmp_path, "codex", model, "Run ls.", mcp_url, env=env, tools=[], mcp=None,
                    permissions={"exec_command": "deny"})
    events = await run_step(executor, task, 240)
    assert isinstance(events[-1], Finished) and events[-1].text == "I cannot run commands here."
    (request,) = [r for r in fake.responses_requests if r["model"] == model]
    assert not {"exec_command", "write_stdin"} & set(fake.tool_names(request))

    marker = tmp_path / "workspace" / "started.txt"
    slow = f"codex-slow-{tmp_path.name}"
    fake.script(slow, [{"tool_calls": [{"name": "exec_command",
                                        "arguments": {"cmd": f"touch {marker} && sleep 120"}}]}])
    await cancel_mid_command(executor, dataclasses.replace(task, model=slow, permissions={}), marker, 180)


# -- opencode -------------------------------------------------------------------------------
def opencode_setup(tmp_path: Path, fake: FakeOpenAI, model: str) -> tuple[OpencodeExecutor, dict[str, str]]:
    config = tmp_path / "opencode-provider.json"
    config.write_text(json.dumps({"provider": {"fake": {
        "npm": "@ai-sdk/openai-compatible", "name": "Fake",
        "options": {"baseURL": fake.base_url, "apiKey": "not-a-real-key"},
        "models": {model: {"name": model}}}}}))
    executor = OpencodeExecutor(Settings(executor_dir=str(tmp_path / "executor")), [str(OPENCODE)])
    return executor, agent_env(tmp_path / "home", OPENCODE_CONFIG=str(config))


@needs_opencode
@pytest.mark.timeout(600)
async def test_opencode_answers_calls_tools_and_continues_its_session(tmp_path: Path, fake: FakeOpenAI,
                                                                      mcp_url: str) -> None:
    model = f"opencode-under-test-{tmp_path.name}"
    fake.script(model, [
        {"text": "Echoing first.", "tool_calls": [{"name": "loopwire_echo", "arguments": {"text": "ping"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo made > made-by-opencode.txt",
                                                       "description": "write the file"}}]},
        {"text": "Done: echoed and wrote the file.", "usage": {"input_tokens": 1200, "output_tokens": 30}},
        {"text": "You asked me to echo ping."}])
    executor, env = opencode_setup(tmp_path, fake, model)
    task = new_task(tmp_path, "opencode", f"fake/{model}", "Echo ping, then write a file.", mcp_url, env=env,
                    permissions={"webfetch": "deny"})
    events = await run_step(executor, task, 500)

    assert kinds(events) == ["SessionStarted", "TextDelta", "ToolCall", "ToolResult", "AssistantMessage",
                             "ToolCall", "ToolResult", "AssistantMessage", "TextDelta", "AssistantMessage",
                             "Finished"]
    echo_call, echo_result = events[2], events[3]
    assert isinstance(echo_call, ToolCall) and echo_call.loopwire_tool == "echo" and echo_call.name == "echo"
    assert isinstance(echo_result, ToolResult) and echo_result.content == "echo: ping"
    bash = events[5]
    assert isinstance(bash, ToolCall) and bash.name == "bash" and bash.loopwire_tool is None
    assert (task.cwd / "made-by-opencode.txt").read_text().strip() == "made"  # in the run's workspace
    steps = [e for e in events if isinstance(e, AssistantMessage)]
    assert all(s.usage is not None and s.usage.input_tokens > 0 for s in steps)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Echoing first.",
                                                                    "Done: echoed and wrote the file."]
    finished = events[-1]
    assert isinstance(finished, Finished) and not finished.is_error
    assert finished.text == "Done: echoed and wrote the file." and finished.turns == 3
    assert finished.usage.output_tokens >= 30 and finished.cost_usd == 0  # no price in opencode's catalog
    session = finished.agent_session
    assert session and session.startswith("ses_")

    requests = [r for r in fake.chat_requests if r["model"] == model]
    assert len(requests) == 3  # no title request: the executor names the session
    offered = fake.tool_names(requests[0])
    assert "loopwire_echo" in offered and "bash" in offered and "webfetch" not in offered
    assert "LW-SYSTEM-NOTE" in json.dumps(requests[0]["messages"])
    assert not await asyncio.to_thread(lambda: list(tmp_path.glob("opencode-*.md")))  # the instructions: gone

    assert executor.session_reachable(session, task.cwd)
    follow = dataclasses.replace(task, step_id="st2", resume=session,
                                 prompt=[{"type": "text", "text": "What did I ask first?"}])
    second = await run_step(executor, follow, 500)
    done = second[-1]
    assert isinstance(done, Finished) and done.text == "You asked me to echo ping." and done.agent_session == session
    history = json.dumps([r for r in fake.chat_requests if r["model"] == model][-1]["messages"])
    assert "Echo ping, then write a file." in history and "Done: echoed and wrote the file." in history


@needs_opencode
@pytest.mark.timeout(600)
async def test_opencode_cancel_leaves_no_process(tmp_path: Path, fake: FakeOpenAI, mcp_url: str) -> None:
    model = f"opencode-slow-{tmp_path.name}"
    marker = tmp_path / "workspace" / "started.txt"
    fake.script(model, [{"tool_calls": [{"name": "bash", "arguments": {
        "command": f"touch {marker} && sleep 120", "description": "wait"}}]}])
    executor, env = opencode_setup(tmp_path, fake, model)
    task = new_task(tmp_path, "opencode", f"fake/{model}", "Wait.", mcp_url, env=env, tools=[], mcp=None)
    await cancel_mid_command(executor, task, marker, 400)
