"""Profile `opencode` with the real opencode CLI (deploy/agents, `make agents`) against the
fake OpenAI Chat Completions API (tests/fakes/openai_server.py, an
`@ai-sdk/openai-compatible` provider in the operator's OPENCODE_CONFIG): its answer, usage
and cost; a loopwire tool served by a `nats.micro` provider, called by the agent over MCP,
and a command of its own, with a tool kept from it; a follow-up that continues opencode's
session. (opencode starts slowly on a loaded machine: these runs take a minute or more.)"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.testing import LoopwireContainer
from tests.agent_binaries import OPENCODE, needs
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, tool_outputs

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents

MODEL = "opencode-agent-under-test"

pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(600),
    needs(OPENCODE, "opencode"),
]


@pytest.fixture(scope="module")
def openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake(openai: FakeOpenAI) -> FakeOpenAI:
    openai.reset()
    return openai


@pytest.fixture(scope="module")
def executor_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("opencode")


@pytest.fixture(scope="module")
def agent_system(fake_anthropic: FakeAnthropic, openai: FakeOpenAI,
                 executor_tmp: Path) -> Iterator[LoopwireContainer]:
    """loopwire with opencode as the operator would set it up: the agent's command, its
    model provider in an OPENCODE_CONFIG file, a home of its own (nothing of this machine's
    user's opencode configuration is read or written)."""
    config = executor_tmp / "opencode.json"
    config.write_text(json.dumps({"provider": {"fake": {
        "npm": "@ai-sdk/openai-compatible", "name": "Fake",
        "options": {"baseURL": openai.base_url, "apiKey": "not-a-real-key"},
        "models": {MODEL: {"name": MODEL}}}}}))
    home = executor_tmp / "home"
    roots = executor_tmp / "roots"
    roots.mkdir()
    env = {"LOOPWIRE_OPENCODE_CMD": str(OPENCODE), "OPENCODE_CONFIG": str(config),
           "LOOPWIRE_EXECUTOR_DIR": str(executor_tmp / "executor"), "LOOPWIRE_ACK_WAIT_S": "30",
           "LOOPWIRE_WORKSPACE_ROOTS": str(roots), "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state")}
    with started_system(fake_anthropic, **env) as lw:
        yield lw


def start_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "profile": "opencode", "input": text, "model": {"primary": f"fake/{MODEL}"}, **extra}


def agent_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in fake.chat_requests if b.get("model") == MODEL]


async def test_opencode_calls_a_loopwire_tool_and_its_own_and_answers(
        agent_system: LoopwireContainer, fake: FakeOpenAI, executor_tmp: Path) -> None:
    fake.script(MODEL, [
        {"text": "Adding first.", "tool_calls": [{"name": "loopwire_add", "arguments": {"a": 2, "b": 3}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo 5 > sum.txt", "description": "save"}}]},
        {"text": "The sum is 5; it is in sum.txt.", "usage": {"input_tokens": 7000, "output_tokens": 12}}])
    name = f"ws-{uuid.uuid4().hex[:8]}"
    path = executor_tmp / "roots" / name
    path.mkdir()
    async with connected(agent_system) as nc:
        provider, svc = await serve_tools(nc)
        try:
            await wait_for_tools(nc, {"add"})
            async with SessionEvents(nc, f"oc-{uuid.uuid4().hex[:10]}") as ev:
                await ev.publish("start", start_body("Add 2 and 3 with the add tool, then save it.", tools=["add"],
                                                     tool_permissions={"webfetch": "deny"},
                                                     metadata={"workspace": name}))
                ended = await ev.wait_for("run.ended", timeout=540)
        finally:
            await svc.stop()
    assert ended["status"] == "completed" and ended["final_text"] == "The sum is 5; it is in sum.txt.", ended
    ((tool, body, headers),) = provider.calls
    assert (tool, body) == ("add", {"a": 2, "b": 3})
    calls = [e for e in ev.events if e["kind"] == "tool.call"]
    # the loopwire tool: run and reported by the tools service, as for any run
    add_call = next(e for e in calls if e["name"] == "add")
    assert "source" not in add_call and headers["Loopwire-Tool-Use-Id"] == add_call["tool_use_id"]
    # opencode's own command: reported by the executor, run in the workspace
    bash_call = next(e for e in calls if e["name"] == "bash")
    bash_result = next(e for e in ev.events if e["kind"] == "tool.result" and e["name"] == "bash")
    assert bash_call["source"] == bash_result["source"] == "executor" and not bash_result["is_error"]
    assert (path / "sum.txt").read_text().strip() == "5"
    # its three model calls, each a message with the usage opencode reported for it
    assert ended["turns"] == 3
    assert ended["usage"]["output_tokens"] >= 12 and ended["usage"]["input_tokens"] >= 7000
    assert ended["cost_usd"] == 0  # as opencode reports it: no price in its catalog for this model
    deltas = [e["text"] for e in ev.events if e["kind"] == "text.delta"]
    assert deltas == ["Adding first.", "The sum is 5; it is in sum.txt."]
    requests = agent_requests(fake)
    assert len(requests) == 3
    offered = fake.tool_names(requests[0])
    assert "loopwire_add" in offered and "bash" in offered and "webfetch" not in offered
    assert tool_outputs(requests[1])[0]["output"] == "5"
    assert not [e for e in ev.events if e["kind"] == "error"]
    ev.check_bodies()


async def test_a_follow_up_continues_opencodes_own_session(agent_system: LoopwireContainer,
                                                           fake: FakeOpenAI) -> None:
    fake.script(MODEL, [{"text": "Nice to meet you, Ada."}, {"text": "Your name is Ada."}])
    async with connected(agent_system) as nc:
        async with SessionEvents(nc, f"oc-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("My name is Ada.", tools=[]))
            first = await ev.wait_for("run.ended", timeout=540)
            await ev.publish("message", {"content": "What is my name?"})
            second = await ev.wait_for("run.ended", timeout=540, count=2)
    assert first["status"] == second["status"] == "completed", (first, second)
    assert first["final_text"] == "Nice to meet you, Ada." and second["final_text"] == "Your name is Ada."
    earlier, later = agent_requests(fake)
    history = json.dumps(later["messages"])
    # opencode's own session: the first exchange is in the second request, once
    assert history.count("My name is Ada.") == 1 and "Nice to meet you, Ada." in history
    assert fake.last_user_text(later).strip() == "What is my name?"
    sessions = {r.headers.get("x-session-id") for r in fake.requests if r.body.get("model") == MODEL}
    assert len(sessions) == 1 and None not in sessions


async def test_past_the_compaction_threshold_a_fresh_session_is_told_the_conversation(
        agent_system: LoopwireContainer, fake: FakeOpenAI) -> None:
    """ContextGuard for an agent without a compaction command loopwire can send: the
    context opencode reported after its turn is past `compaction_at_pct` of
    `context_window`, so the follow-up goes to a new opencode session, told the earlier
    conversation in a trimmed transcript, reported as a `compaction` (`fresh_session`)."""
    fake.script(MODEL, [{"text": "Nice to meet you, Ada.", "usage": {"input_tokens": 9000, "output_tokens": 10}},
                        {"text": "Your name is Ada."}])
    limits = {"context_window": 10000, "compaction_at_pct": 0.5}
    async with connected(agent_system) as nc:
        async with SessionEvents(nc, f"oc-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("My name is Ada.", tools=[], limits=limits))
            await ev.wait_for("run.ended", timeout=540)
            assert not ev.of("compaction")
            await ev.publish("message", {"content": "What is my name?"})
            second = await ev.wait_for("run.ended", timeout=540, count=2)
    assert second["status"] == "completed" and second["final_text"] == "Your name is Ada.", second
    (compaction,) = ev.of("compaction")
    assert compaction["method"] == "fresh_session" and compaction["tokens_before"] >= 9000
    assert compaction["tokens_after"] < compaction["tokens_before"]
    earlier, later = agent_requests(fake)
    sessions = [r.headers.get("x-session-id") for r in fake.requests if r.body.get("model") == MODEL]
    assert len(set(sessions)) == 2, "a new agent session"
    told = fake.last_user_text(later)
    assert "My name is Ada." in told and "Nice to meet you, Ada." in told and "What is my name?" in told
    ev.check_bodies()
