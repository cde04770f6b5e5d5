"""Profile `claude_code` with the real Claude Code CLI (deploy/agents, `make agents`)
against the fake Messages API: its answer, usage and cost; a loopwire tool served by a
`nats.micro` provider, called by the agent over MCP; a follow-up that keeps the agent's
history; its `Bash` under `deny`, `approve` and `auto`; `abort` that leaves no agent
process; and the deployed layout (one `loopwire serve` per service, two routers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.testing import LoopwireContainer
from tests.agent_binaries import CLAUDE, needs
from tests.agent_processes import cmdline, processes_in
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, serve_tools, started_system, wait_for_tools
from .events import SessionEvents, query

MODEL = "claude-agent-under-test"

pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(240),
    needs(CLAUDE, "Claude Code"),
]


def agent_env(tmp: Path, **extra: str) -> dict[str, str]:
    return {"LOOPWIRE_CLAUDE_CODE_CMD": str(CLAUDE), "LOOPWIRE_EXECUTOR_DIR": str(tmp / "executor"),
            "LOOPWIRE_ACK_WAIT_S": "10", **extra}


@pytest.fixture(scope="module")
def executor_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claude-code")


@pytest.fixture(scope="module")
def agent_system(fake_anthropic: FakeAnthropic, executor_tmp: Path) -> Iterator[LoopwireContainer]:
    roots = executor_tmp / "roots"
    roots.mkdir()
    with started_system(fake_anthropic, **agent_env(executor_tmp, LOOPWIRE_WORKSPACE_ROOTS=str(roots))) as lw:
        yield lw


@contextlib.asynccontextmanager
async def session(system: LoopwireContainer) -> AsyncIterator[SessionEvents]:
    async with connected(system) as nc:
        async with SessionEvents(nc, f"cc-{uuid.uuid4().hex[:10]}") as events:
            yield events


def agent_requests(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [b for b in fake.message_requests if b.get("model") == MODEL]


def user_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body.get("messages", []):
        content = m.get("content")
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            if m.get("role") == "user" and b.get("type") == "text":
                out.append(b["text"])
    return out


def agent_files_hold(config_dir: Path, needle: str) -> bool:
    return any(needle in f.read_text(errors="replace") for f in config_dir.glob("projects/*/*.jsonl"))


async def wait_for_agent_file(config_dir: Path, needle: str, timeout: float = 10.0) -> None:
    """Until one of Claude Code's session files under `config_dir` holds `needle`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await asyncio.to_thread(agent_files_hold, config_dir, needle):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no session file under {config_dir} holds {needle} after {timeout:g} s")


def start_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "profile": "claude_code", "input": text, "model": {"primary": MODEL}, **extra}


async def test_claude_code_answers_with_its_usage_and_cost(agent_system: LoopwireContainer,
                                                           fake: FakeAnthropic) -> None:
    fake.script(MODEL, [{"text": "The capital of France is Paris."}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("What is the capital of France?", tools=[]))
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed", ended
    assert ended["final_text"] == "The capital of France is Paris."
    assert ended["usage"]["input_tokens"] > 0 and ended["usage"]["output_tokens"] > 0
    assert isinstance(ended["cost_usd"], float) and ended["cost_usd"] > 0  # as the agent reported it
    deltas = "".join(e["text"] for e in ev.events if e["kind"] == "text.delta")
    assert deltas == "The capital of France is Paris."
    (message,) = [e for e in ev.events if e["kind"] == "message"]
    assert message["message"]["content"] == [{"type": "text", "text": "The capital of France is Paris."}]
    assert not [e for e in ev.events if e["kind"] == "error"]
    (request,) = agent_requests(fake)
    assert "What is the capital of France?" in user_texts(request)
    ev.check_bodies()


async def test_claude_code_calls_a_loopwire_tool_over_mcp(agent_system: LoopwireContainer,
                                                          fake: FakeAnthropic) -> None:
    fake.script(MODEL, [{"tool_use": [{"name": "mcp__loopwire__add", "input": {"a": 2, "b": 3}}]},
                        {"text": "The sum is 5."}])
    async with connected(agent_system) as nc:
        provider, svc = await serve_tools(nc)
        try:
            await wait_for_tools(nc, {"add"})
            async with SessionEvents(nc, f"cc-{uuid.uuid4().hex[:10]}") as ev:
                await ev.publish("start", start_body("Add 2 and 3 with the add tool.", tools=["add"],
                                                     user_id="user-42", metadata={"workspace_id": "ws-7"}))
                ended = await ev.wait_for("run.ended", timeout=120)
        finally:
            await svc.stop()
    assert ended["status"] == "completed" and ended["final_text"] == "The sum is 5.", ended
    ((name, body, headers),) = provider.calls
    assert (name, body) == ("add", {"a": 2, "b": 3})
    call = next(e for e in ev.events if e["kind"] == "tool.call")
    result = next(e for e in ev.events if e["kind"] == "tool.result")
    # the tools service ran it, as for any call of the run: its events, the run's id, the
    # agent's own tool_use id as the idempotency key
    assert call["name"] == "add" and call["run_id"] == ended["run_id"] and "source" not in call
    assert headers["Loopwire-Tool-Use-Id"] == call["tool_use_id"] == result["tool_use_id"]
    assert (headers["Loopwire-User-Id"], headers["Loopwire-Workspace-Id"]) == ("user-42", "ws-7"), \
        "the run's context fields reach a provider through the agent's MCP calls too"
    assert headers["Loopwire-Session-Id"] == ev.sid
    assert result["content"] == "5" and result["is_error"] is False
    tool_results = [b for r in agent_requests(fake) for m in r["messages"] if m["role"] == "user"
                    for b in (m["content"] if isinstance(m["content"], list) else []) if b.get("type") == "tool_result"]
    assert any("5" in json.dumps(b.get("content")) for b in tool_results)  # the agent read the result
    kinds = [e["kind"] for e in ev.events if e["kind"] in ("message", "tool.call", "tool.result")]
    assert kinds == ["message", "tool.call", "tool.result", "message"]
    ev.check_bodies()


async def test_a_follow_up_continues_the_agents_own_session(agent_system: LoopwireContainer,
                                                            fake: FakeAnthropic) -> None:
    fake.script(MODEL, [{"text": "Nice to meet you, Ada."}, {"text": "Your name is Ada."}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("My name is Ada.", tools=[]))
        first = await ev.wait_for("run.ended", timeout=120)
        await ev.publish("message", {"content": "What is my name?"})
        second = await ev.wait_for("run.ended", timeout=120, count=2)
    assert first["status"] == second["status"] == "completed"
    assert second["final_text"] == "Your name is Ada."
    earlier, later = agent_requests(fake)
    # the agent's own history: the first turn (question and answer) is in the second request, once
    texts = user_texts(later)
    assert sum("My name is Ada." in t for t in texts) == 1 and any("What is my name?" in t for t in texts)
    answers = [b.get("text") for m in later["messages"] if m["role"] == "assistant"
               for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert "Nice to meet you, Ada." in answers
    sessions = {r.headers.get("X-Claude-Code-Session-Id") for r in fake.requests if r.body.get("model") == MODEL}
    assert len(sessions) == 1 and None not in sessions  # one agent session, resumed


BASH = {"tool_use": [{"name": "Bash", "input": {"command": "touch made-by-agent.txt",
                                                "description": "make a file"}}]}


def workspace(system_tmp: Path) -> tuple[str, Path]:
    """A fresh workspace under the operator's root: (metadata.workspace, its path)."""
    name = f"ws-{uuid.uuid4().hex[:8]}"
    path = system_tmp / "roots" / name
    path.mkdir()
    return name, path


@pytest.mark.parametrize("permission", ["deny", "auto"])
async def test_the_agents_bash_under_deny_never_runs_and_under_auto_runs(
        agent_system: LoopwireContainer, fake: FakeAnthropic, executor_tmp: Path, permission: str) -> None:
    fake.script(MODEL, [BASH, {"text": "Done."}])
    name, path = workspace(executor_tmp)
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Make a file.", tools=[], tool_permissions={"Bash": permission},
                                             metadata={"workspace": name}))
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed" and ended["final_text"] == "Done.", ended
    call = next(e for e in ev.events if e["kind"] == "tool.call")
    result = next(e for e in ev.events if e["kind"] == "tool.result")
    assert (call["name"], call["source"], result["source"]) == ("Bash", "executor", "executor")
    first = agent_requests(fake)[0]
    offered = {t["name"] for t in first.get("tools", [])}
    if permission == "deny":
        assert "Bash" not in offered  # kept from the agent altogether
        assert result["is_error"] is True and not (path / "made-by-agent.txt").exists()
    else:
        assert "Bash" in offered and result["is_error"] is False and (path / "made-by-agent.txt").exists()
    assert not [e for e in ev.events if e["kind"] == "approval.requested"]


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_the_agents_bash_under_approve_waits_for_the_decision(
        agent_system: LoopwireContainer, fake: FakeAnthropic, executor_tmp: Path, decision: str) -> None:
    fake.script(MODEL, [BASH, {"text": "Finished."}])
    name, path = workspace(executor_tmp)
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Make a file.", tools=[], tool_permissions={"Bash": "approve"},
                                             metadata={"workspace": name}))
        asked = await ev.wait_for("approval.requested", timeout=120)
        assert asked["source"] == "executor"
        assert asked["tool_calls"][0]["name"] == "Bash"
        assert asked["tool_calls"][0]["input"]["command"] == "touch made-by-agent.txt"
        status = await query(ev.nc, "session.get", {"session_id": ev.sid})
        assert status["status"] == "awaiting_approval"
        await asyncio.sleep(1.0)  # the agent waits: nothing ran
        assert not (path / "made-by-agent.txt").exists()
        await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": decision,
                                      "note": "checked"})
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed" and ended["final_text"] == "Finished.", ended
    result = next(e for e in ev.events if e["kind"] == "tool.result")
    if decision == "approve":
        assert (path / "made-by-agent.txt").exists() and result["is_error"] is False
    else:
        assert not (path / "made-by-agent.txt").exists() and result["is_error"] is True
        assert "denied by the user: checked" in json.dumps(result["content"])


async def test_abort_mid_run_leaves_no_agent_process(agent_system: LoopwireContainer, fake: FakeAnthropic,
                                                     executor_tmp: Path) -> None:
    # (Claude Code refuses a bare `sleep`)
    command = "python3 -c 'import time; time.sleep(97)' && echo woke"
    fake.script(MODEL, [{"tool_use": [{"name": "Bash", "input": {"command": command, "timeout": 600000}}]},
                        {"text": "Slept."}])
    name, path = workspace(executor_tmp)
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Sleep a while.", tools=[], metadata={"workspace": name}))
        await ev.wait_for("tool.call", timeout=120, name="Bash")
        deadline = asyncio.get_running_loop().time() + 30
        while not any("time.sleep(97)" in cmdline(p) for p in processes_in(path)):
            assert asyncio.get_running_loop().time() < deadline, "the agent's Bash never started"
            await asyncio.sleep(0.2)
        assert len(processes_in(path)) >= 2  # the agent and its shell's sleep
        await ev.publish("abort", {"reason": "enough"})
        ended = await ev.wait_for("run.ended", timeout=60)
        assert ended["status"] == "aborted"
        deadline = asyncio.get_running_loop().time() + 20
        while processes_in(path):
            assert asyncio.get_running_loop().time() < deadline, f"still running: {processes_in(path)}"
            await asyncio.sleep(0.2)


async def test_in_the_deployed_layout_an_approval_and_a_follow_up_reach_the_agent(
        fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    """One `loopwire serve` per service, two routers: the agent's permission request goes
    to a router in another process and its decision comes back to the waiting agent; the
    follow-up resumes the agent's session."""
    fake_anthropic.reset()
    fake_anthropic.script(MODEL, [BASH, {"text": "Made it."}, {"text": "It is called made-by-agent.txt."}])
    roots = tmp_path / "roots"
    (roots / "ws").mkdir(parents=True)
    env = agent_env(tmp_path, LOOPWIRE_WORKSPACE_ROOTS=str(roots))
    with started_system(fake_anthropic, layout="split", **env) as system:
        async with session(system) as ev:
            await ev.publish("start", start_body("Make a file.", tools=[], tool_permissions={"Bash": "approve"},
                                                 metadata={"workspace": "ws"}))
            asked = await ev.wait_for("approval.requested", timeout=120)
            assert not (roots / "ws" / "made-by-agent.txt").exists()
            await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
            first = await ev.wait_for("run.ended", timeout=120)
            await ev.publish("message", {"content": "What is the file called?"})
            second = await ev.wait_for("run.ended", timeout=120, count=2)
    assert first["status"] == "completed" and (roots / "ws" / "made-by-agent.txt").exists()
    assert second["final_text"] == "It is called made-by-agent.txt."
    later = agent_requests(fake_anthropic)[-1]
    assert any("Make a file." in t for t in user_texts(later))  # the agent's own history


def agent_sessions_seen(fake: FakeAnthropic) -> list[str]:
    """The agent session id of each of the agent's model calls, in order."""
    return [r.headers.get("X-Claude-Code-Session-Id", "") for r in fake.requests
            if r.path == "/v1/messages" and r.body.get("model") == MODEL]


@pytest.mark.parametrize("files", ["reachable", "lost"])
async def test_kill_9_mid_turn_resumes_the_agents_session_or_restarts_the_turn(
        fake_anthropic: FakeAnthropic, tmp_path: Path, files: str) -> None:
    """`loopwire up` killed while the agent runs a command: the agent dies with it; the
    redelivered step resumes the agent's session when its files are on this machine, and
    starts the turn again in a new agent session when they are not. Either way the lost
    text is retracted and the run ends with one answer."""
    fake_anthropic.reset()
    command = "python3 -c 'import time; time.sleep(6)' && echo woke"
    fake_anthropic.script(MODEL, [{"text": "Starting: ", "tool_use": [{"name": "Bash", "input": {"command": command}}]},
                                  {"text": "Recovered."}])
    roots = tmp_path / "roots"
    (roots / "ws").mkdir(parents=True)
    env = agent_env(tmp_path, LOOPWIRE_WORKSPACE_ROOTS=str(roots), LOOPWIRE_ACK_WAIT_S="3",
                    CLAUDE_CONFIG_DIR=str(tmp_path / "claude-1"))
    with started_system(fake_anthropic, **env) as system:
        async with session(system) as ev:
            await ev.publish("start", start_body("Run the slow command.", tools=[], metadata={"workspace": "ws"}))
            await ev.wait_for("tool.call", timeout=120, name="Bash")
            # The agent writes its session file a moment after it streams the tool call;
            # the kill must come once its files hold that turn (they are what "reachable"
            # resumes), which is still well inside the command's six seconds.
            await wait_for_agent_file(tmp_path / "claude-1", '"tool_use"')
            system.kill()
            if files == "lost":  # the restarted llm service looks elsewhere: another machine
                system.env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude-2")
            await asyncio.to_thread(system.start_loopwire)
            ended = await ev.wait_for("run.ended", timeout=150)
    assert ended["status"] == "completed" and ended["final_text"] == "Recovered.", ended
    assert [e for e in ev.events if e["kind"] == "retracted"]
    assert len([e for e in ev.events if e["kind"] == "run.ended"]) == 1
    before, after = agent_sessions_seen(fake_anthropic)[0], agent_sessions_seen(fake_anthropic)[-1]
    last = agent_requests(fake_anthropic)[-1]
    texts = user_texts(last)
    assert sum("Run the slow command." in t for t in texts) == 1  # the input, once
    if files == "reachable":
        assert after == before  # the same agent session, resumed
        assert any("interrupted" in t for t in texts)
    else:
        assert after != before  # a new agent session, the turn from its start
        assert not any("interrupted" in t for t in texts)


async def test_a_steer_stops_the_agents_turn_and_reaches_its_session(agent_system: LoopwireContainer,
                                                                     fake: FakeAnthropic, executor_tmp: Path) -> None:
    command = "python3 -c 'import time; time.sleep(89)' && echo woke"
    # Resumed after the steer, the agent may first close its interrupted turn with a model
    # call of its own and only then take the steer (a loaded CI run saw two calls): both
    # get the same answer, and the last call must carry the steer.
    fake.script(MODEL, [{"tool_use": [{"name": "Bash", "input": {"command": command, "timeout": 600000}}]},
                        {"text": "Hello instead."}, {"text": "Hello instead."}])
    name, path = workspace(executor_tmp)
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Sleep a while.", tools=[], metadata={"workspace": name}))
        await ev.wait_for("tool.call", timeout=120, name="Bash")
        await ev.publish("steer", {"content": "Stop that and just say hello."})
        ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed" and ended["final_text"] == "Hello instead.", ended
    assert not any("time.sleep(89)" in cmdline(p) for p in processes_in(path))  # the first turn's tree is gone
    sessions = agent_sessions_seen(fake)
    assert len(set(sessions)) == 1  # the steer went to the agent's own session
    texts = user_texts(agent_requests(fake)[-1])
    assert any("Stop that and just say hello." in t for t in texts)
    assert sum("Sleep a while." in t for t in texts) == 1


async def test_past_the_compaction_threshold_the_agent_compacts_its_own_context(
        agent_system: LoopwireContainer, fake: FakeAnthropic) -> None:
    """ContextGuard through the agent: the context it reported after its turn is past
    `compaction_at_pct` of `context_window`, so the next step first has it compact (its
    `/compact`), reported as a `compaction` event, then gives it the follow-up."""
    fake.script(MODEL, [{"text": "Noted: your name is Ada."}])
    # Then: the follow-up's answer, and for the agent's own compaction calls (it makes
    # more than one) a summary.
    fake.responder = lambda body: {"text": "You are Ada." if any("Who am I?" in t for t in user_texts(body))
                                   else "Summary: the user is called Ada."}
    limits = {"context_window": 20000, "compaction_at_pct": 0.5}  # the agent's prompt alone is ~13k here
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("My name is Ada.", tools=[], limits=limits))
        await ev.wait_for("run.ended", timeout=120)
        assert not [e for e in ev.events if e["kind"] == "compaction"]
        await ev.publish("message", {"content": "Who am I?"})
        ended = await ev.wait_for("run.ended", timeout=120, count=2)
    assert ended["status"] == "completed" and ended["final_text"] == "You are Ada.", ended
    (compaction,) = [e for e in ev.events if e["kind"] == "compaction"]
    assert compaction["method"] == "agent_manual" and compaction["tokens_after"] < compaction["tokens_before"]
    last = agent_requests(fake)[-1]
    texts = user_texts(last)
    assert any("Summary: the user is called Ada." in t for t in texts)  # the agent's context is the summary
    assert not any(t == "My name is Ada." for t in texts) and any("Who am I?" in t for t in texts)


@pytest.mark.parametrize(("limits", "status", "reason"), [({"max_turns": 1}, "max_turns", "max_turns"),
                                                          ({"max_cost_usd": 0.01}, "budget_exhausted", "max_cost_usd")])
async def test_the_agent_stops_at_the_runs_turns_and_budget(agent_system: LoopwireContainer, fake: FakeAnthropic,
                                                            limits: dict[str, Any], status: str, reason: str) -> None:
    fake.script(MODEL, [{"text": "Looking. ", "tool_use": [{"name": "Read", "input": {"file_path": "/etc/hostname"}}]},
                        {"text": "More."}, {"text": "Even more."}])
    async with session(agent_system) as ev:
        await ev.publish("start", start_body("Read the hostname.", tools=[], limits=limits))
        ended = await ev.wait_for("run.ended", timeout=120)
    assert (ended["status"], ended.get("reason")) == (status, reason), ended
    assert len(agent_requests(fake)) == 1  # the agent made no second call
    assert ended["turns"] == 1 and ended["final_text"]
