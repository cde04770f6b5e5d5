"""Profile `codex` with the real Codex CLI (deploy/agents, `make agents`) against the fake
OpenAI Responses API (tests/fakes/openai_server.py, a model provider of Codex's own given
in LOOPWIRE_CODEX_CMD): its answer, usage and cost; a loopwire tool served by a
`nats.micro` provider, called by the agent over MCP, and a command of its own; a follow-up
that continues Codex's thread; a tool kept from it; `abort` that leaves none of its
processes; and the deployed layout (one `loopwire serve` per service, two routers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.testing import LoopwireContainer
from tests.agent_binaries import CODEX, needs
from tests.agent_processes import cmdline, processes_in
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, tool_outputs

from .conftest import E2E_ENV, connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents

MODEL = "codex-agent-under-test"
PRICE = {"input": 2.0, "output": 8.0}  # USD per million tokens, loopwire's table (Codex reports no cost)

pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(240),
    needs(CODEX, "Codex"),
]


@pytest.fixture(scope="module")
def openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake(openai: FakeOpenAI) -> FakeOpenAI:
    openai.reset()
    return openai


def agent_env(tmp: Path, openai: FakeOpenAI, **extra: str) -> dict[str, str]:
    provider = (f'model_providers.fake={{name="fake", base_url="{openai.base_url}", env_key="FAKE_OPENAI_KEY", '
                'wire_api="responses", request_max_retries=0, stream_max_retries=0}')
    command = shlex.join([str(CODEX), "-c", "model_provider=fake", "-c", provider])
    return {"LOOPWIRE_CODEX_CMD": command, "FAKE_OPENAI_KEY": "not-a-real-key",
            "LOOPWIRE_EXECUTOR_DIR": str(tmp / "executor"), "LOOPWIRE_ACK_WAIT_S": "10",
            "LOOPWIRE_PRICES": json.dumps({MODEL: PRICE}), **extra}


@pytest.fixture(scope="module")
def executor_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("codex")


@pytest.fixture(scope="module")
def agent_system(fake_anthropic: FakeAnthropic, openai: FakeOpenAI,
                 executor_tmp: Path) -> Iterator[LoopwireContainer]:
    roots = executor_tmp / "roots"
    roots.mkdir()
    with started_system(fake_anthropic, **agent_env(executor_tmp, openai, LOOPWIRE_WORKSPACE_ROOTS=str(roots))) as lw:
        yield lw


@contextlib.asynccontextmanager
async def session(system: LoopwireContainer) -> AsyncIterator[SessionEvents]:
    async with connected(system) as nc:
        async with SessionEvents(nc, f"cx-{uuid.uuid4().hex[:10]}") as events:
            yield events


def start_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "profile": "codex", "input": text, "model": {"primary": MODEL}, **extra}


def agent_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in fake.responses_requests if b.get("model") == MODEL]


def workspace(system_tmp: Path) -> tuple[str, Path]:
    name = f"ws-{uuid.uuid4().hex[:8]}"
    path = system_tmp / "roots" / name
    path.mkdir()
    return name, path


async def test_codex_answers_with_its_usage_and_cost(agent_system: LoopwireContainer, fake: FakeOpenAI) -> None:
    fake.script(MODEL, [{"text": "The capital of France is Paris.", "usage": {"input_tokens": 9000,
                                                                             "output_tokens": 9}}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("What is the capital of France?", tools=[]))
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed", ended
    assert ended["final_text"] == "The capital of France is Paris."
    assert ended["usage"]["input_tokens"] == 9000 and ended["usage"]["output_tokens"] == 9
    assert ended["cost_usd"] == pytest.approx((9000 * PRICE["input"] + 9 * PRICE["output"]) / 1e6)
    deltas = "".join(e["text"] for e in ev.events if e["kind"] == "text.delta")
    assert deltas == "The capital of France is Paris."
    (message,) = [e for e in ev.events if e["kind"] == "message"]
    assert message["message"]["content"] == [{"type": "text", "text": "The capital of France is Paris."}]
    assert not [e for e in ev.events if e["kind"] == "error"]
    (request,) = agent_requests(fake)
    assert fake.last_user_text(request).strip() == "What is the capital of France?"
    ev.check_bodies()


async def test_codex_calls_a_loopwire_tool_over_mcp_and_runs_its_own_command(
        agent_system: LoopwireContainer, fake: FakeOpenAI, executor_tmp: Path) -> None:
    fake.script(MODEL, [
        {"tool_calls": [{"name": "add", "namespace": "mcp__loopwire", "arguments": {"a": 2, "b": 3}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo 5 > sum.txt"}}]},
        {"text": "The sum is 5; it is in sum.txt."}])
    name, path = workspace(executor_tmp)
    async with connected(agent_system) as nc:
        provider, svc = await serve_tools(nc)
        try:
            await wait_for_tools(nc, {"add"})
            async with SessionEvents(nc, f"cx-{uuid.uuid4().hex[:10]}") as ev:
                await ev.publish("start", start_body("Add 2 and 3 with the add tool, then save it.", tools=["add"],
                                                     metadata={"workspace": name}))
                ended = await ev.wait_for("run.ended", timeout=120)
        finally:
            await svc.stop()
    assert ended["status"] == "completed" and ended["final_text"] == "The sum is 5; it is in sum.txt.", ended
    ((tool, body, headers),) = provider.calls
    assert (tool, body) == ("add", {"a": 2, "b": 3})
    calls = [e for e in ev.events if e["kind"] == "tool.call"]
    results = [e for e in ev.events if e["kind"] == "tool.result"]
    # the loopwire tool: run and reported by the tools service, as for any run
    add_call = next(e for e in calls if e["name"] == "add")
    assert "source" not in add_call and add_call["run_id"] == ended["run_id"]
    assert headers["Loopwire-Tool-Use-Id"] == add_call["tool_use_id"]
    # Codex's own command: reported by the executor, run in the workspace
    shell_call = next(e for e in calls if e["name"] == "exec_command")
    shell_result = next(e for e in results if e["name"] == "exec_command")
    assert shell_call["source"] == shell_result["source"] == "executor" and not shell_result["is_error"]
    assert (path / "sum.txt").read_text().strip() == "5"
    # the tool's result went back to the model through Codex
    requests = agent_requests(fake)
    assert "mcp__loopwire__add" in fake.tool_names(requests[0])
    assert tool_outputs(requests[1])[0]["output"].endswith("5")
    assert [e["kind"] for e in ev.events if e["kind"] == "message"] == ["message"] * 3
    assert ended["turns"] == 3
    ev.check_bodies()


async def test_a_follow_up_continues_codexs_own_thread(agent_system: LoopwireContainer, fake: FakeOpenAI) -> None:
    fake.script(MODEL, [{"text": "Nice to meet you, Ada."}, {"text": "Your name is Ada."}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("My name is Ada.", tools=[]))
        first = await ev.wait_for("run.ended", timeout=120)
        await ev.publish("message", {"content": "What is my name?"})
        second = await ev.wait_for("run.ended", timeout=120, count=2)
    assert first["status"] == second["status"] == "completed"
    assert second["final_text"] == "Your name is Ada."
    earlier, later = agent_requests(fake)
    history = json.dumps(later["input"])
    # Codex's own thread: the first exchange is in the second request, once
    assert history.count("My name is Ada.") == 1 and "Nice to meet you, Ada." in history
    assert fake.last_user_text(later).strip() == "What is my name?"
    # the second run's usage is its own, not the thread's running total
    assert 0 < second["usage"]["input_tokens"] and second["usage"]["output_tokens"] < 20
    threads = {r.headers.get("session-id") for r in fake.requests if r.body.get("model") == MODEL}
    assert len(threads) == 1 and None not in threads


async def test_a_denied_command_tool_is_kept_from_codex(agent_system: LoopwireContainer, fake: FakeOpenAI) -> None:
    fake.script(MODEL, [{"text": "I have no shell here."}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("List the files.", tools=[],
                                             tool_permissions={"exec_command": "deny", "web_search": "approve"}))
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed" and ended["final_text"] == "I have no shell here."
    (request,) = agent_requests(fake)
    offered = set(fake.tool_names(request))
    # not offered at all; web_search to be approved neither: `codex exec` has no one to ask
    assert not {"exec_command", "write_stdin"} & offered and "web_search" not in offered


async def test_abort_mid_run_leaves_no_codex_process(agent_system: LoopwireContainer, fake: FakeOpenAI,
                                                     executor_tmp: Path) -> None:
    fake.script(MODEL, [{"tool_calls": [{"name": "exec_command", "arguments": {
        "cmd": "python3 -c 'import time; time.sleep(97)' && echo woke", "yield_time_ms": 600000}}]},
        {"text": "Slept."}])
    name, path = workspace(executor_tmp)
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Sleep a while.", tools=[], metadata={"workspace": name}))
        await ev.wait_for("tool.call", timeout=120, name="exec_command")
        deadline = asyncio.get_running_loop().time() + 30
        while not any("time.sleep(97)" in cmdline(p) for p in processes_in(path)):
            assert asyncio.get_running_loop().time() < deadline, "Codex's command never started"
            await asyncio.sleep(0.2)
        await ev.publish("abort", {"reason": "enough"})
        ended = await ev.wait_for("run.ended", timeout=60)
        assert ended["status"] == "aborted"
        deadline = asyncio.get_running_loop().time() + 20
        while processes_in(path):
            assert asyncio.get_running_loop().time() < deadline, \
                f"still running: {[cmdline(p) for p in processes_in(path)]}"
            await asyncio.sleep(0.2)


async def test_in_the_deployed_layout_codex_calls_a_tool_and_follows_up(
        fake_anthropic: FakeAnthropic, fake: FakeOpenAI, tmp_path: Path) -> None:
    """One `loopwire serve` per service, two routers: the tool call crosses from the llm
    process's MCP bridge to the tools process; the follow-up resumes Codex's thread."""
    fake.script(MODEL, [{"tool_calls": [{"name": "add", "namespace": "mcp__loopwire", "arguments": {"a": 4, "b": 4}}]},
                        {"text": "It is 8."}, {"text": "I added 4 and 4."}])
    env = {**E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url, **agent_env(tmp_path, fake)}
    # six processes starting at once: on a loaded machine that takes close to a minute
    with LoopwireContainer(env=env, layout="split", ready_timeout=180) as system:
        async with connected(system) as nc:
            provider, svc = await serve_tools(nc)
            try:
                await wait_for_tools(nc, {"add"})
                async with SessionEvents(nc, f"cx-{uuid.uuid4().hex[:10]}") as ev:
                    await ev.publish("start", start_body("Add 4 and 4.", tools=["add"]))
                    first = await ev.wait_for("run.ended", timeout=120)
                    await ev.publish("message", {"content": "What did you do?"})
                    second = await ev.wait_for("run.ended", timeout=120, count=2)
            finally:
                await svc.stop()
    assert first["status"] == "completed" and first["final_text"] == "It is 8.", first
    assert [(t, b) for t, b, _ in provider.calls] == [("add", {"a": 4, "b": 4})]
    assert second["final_text"] == "I added 4 and 4."
    assert "Add 4 and 4." in json.dumps(agent_requests(fake)[-1]["input"])  # Codex's own history
