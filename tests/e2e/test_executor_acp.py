"""Profile `acp` with a real ACP agent, `claude-code-acp` (deploy/agents, `make agents`),
through the official Python SDK of the Agent Client Protocol, against the fake Messages
API: it answers; its `session/request_permission` becomes `approval.requested`; its plan
becomes `plan.updated`; a follow-up loads its session (`session/load`); an agent the
operator did not name is refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.testing import LoopwireContainer
from tests.agent_binaries import ACP_AGENT, needs
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import connected, started_system
from .events import SessionEvents, query

MODEL = "claude-acp-under-test"

pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(240),
    needs(ACP_AGENT, "claude-code-acp"),
]


@pytest.fixture(scope="module")
def acp_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("acp")


@pytest.fixture(scope="module")
def acp_system(fake_anthropic: FakeAnthropic, acp_tmp: Path) -> Iterator[LoopwireContainer]:
    (acp_tmp / "roots").mkdir()
    env = {"LOOPWIRE_ACP_AGENTS": json.dumps({"claude": str(ACP_AGENT)}),
           "LOOPWIRE_EXECUTOR_DIR": str(acp_tmp / "executor"), "LOOPWIRE_WORKSPACE_ROOTS": str(acp_tmp / "roots"),
           "LOOPWIRE_ACK_WAIT_S": "10"}
    with started_system(fake_anthropic, **env) as lw:
        yield lw


def start_body(text: str, agent: str = "claude", **extra: Any) -> dict[str, Any]:
    return {"v": 1, "profile": "acp", "executor": {"agent": agent}, "input": text, "model": {"primary": MODEL},
            "tools": [], **extra}


def agent_requests(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [b for b in fake.message_requests if b.get("model") == MODEL]


def texts_of(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body.get("messages", []):
        content = m.get("content")
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            if b.get("type") == "text":
                out.append(f"{m.get('role')}: {b['text']}")
    return out


async def test_an_acp_agent_answers_and_a_follow_up_loads_its_session(acp_system: LoopwireContainer,
                                                                      fake: FakeAnthropic) -> None:
    # Answers by what was asked (a request the agent sends again, retried under load, gets
    # the same answer).
    fake.responder = lambda body: {"text": "You said hello." if any("What did I ask?" in t for t in texts_of(body))
                                   else "Hello from the ACP agent."}
    async with connected(acp_system) as nc:
        async with SessionEvents(nc, f"acp-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("Say hello."))
            first = await ev.wait_for("run.ended", timeout=120)
            await ev.publish("message", {"content": "What did I ask?"})
            second = await ev.wait_for("run.ended", timeout=120, count=2)
    assert first["status"] == "completed" and first["final_text"] == "Hello from the ACP agent.", first
    assert "".join(e["text"] for e in ev.events if e["kind"] == "text.delta" and e["run_id"] == first["run_id"]) \
        == "Hello from the ACP agent."
    assert second["status"] == "completed" and second["final_text"] == "You said hello.", second
    later = agent_requests(fake)[-1]
    seen = texts_of(later)
    # session/load: the agent's own history, the first prompt once
    assert sum("Say hello." in t for t in seen) == 1 and any("Hello from the ACP agent." in t for t in seen)
    assert any("What did I ask?" in t for t in seen)
    ev.check_bodies()


async def test_its_permission_request_becomes_approval_requested(acp_system: LoopwireContainer, fake: FakeAnthropic,
                                                                 acp_tmp: Path) -> None:
    name = f"ws-{uuid.uuid4().hex[:8]}"
    (acp_tmp / "roots" / name).mkdir()
    fake.script(MODEL, [{"tool_use": [{"name": "Bash", "input": {"command": "touch acp-made.txt",
                                                                  "description": "make a file"}}]},
                        {"text": "Made the file."}])
    async with connected(acp_system) as nc:
        async with SessionEvents(nc, f"acp-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("Make a file.", tool_permissions={"Bash": "approve"},
                                                 metadata={"workspace": name}))
            asked = await ev.wait_for("approval.requested", timeout=120)
            assert asked["source"] == "executor" and asked["tool_calls"][0]["name"] == "Bash"
            assert asked["tool_calls"][0]["input"]["command"] == "touch acp-made.txt"
            status = await query(nc, "session.get", {"session_id": ev.sid})
            assert status["status"] == "awaiting_approval"
            assert not (acp_tmp / "roots" / name / "acp-made.txt").exists()
            await ev.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
            ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed" and ended["final_text"] == "Made the file.", ended
    assert (acp_tmp / "roots" / name / "acp-made.txt").exists()
    call = next(e for e in ev.events if e["kind"] == "tool.call")
    result = next(e for e in ev.events if e["kind"] == "tool.result")
    assert (call["name"], call["source"], result["is_error"]) == ("Bash", "executor", False)


async def test_its_plan_becomes_plan_updated(acp_system: LoopwireContainer, fake: FakeAnthropic) -> None:
    todos = [{"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
             {"content": "Write the fix", "status": "in_progress", "activeForm": "Writing the fix"}]
    fake.script(MODEL, [{"tool_use": [{"name": "TodoWrite", "input": {"todos": todos}}]}, {"text": "Planned."}])
    async with connected(acp_system) as nc:
        async with SessionEvents(nc, f"acp-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("Plan the fix."))
            ended = await ev.wait_for("run.ended", timeout=120)
    assert ended["status"] == "completed", ended
    plan = next(e for e in ev.events if e["kind"] == "plan.updated")
    assert plan["source"] == "executor"
    ev.check_bodies()
    assert plan["steps"] == [{"step": "Read the code", "status": "completed"},
                             {"step": "Write the fix", "status": "in_progress"}]


async def test_an_agent_the_operator_did_not_name_is_refused(acp_system: LoopwireContainer,
                                                             fake: FakeAnthropic) -> None:
    async with connected(acp_system) as nc:
        async with SessionEvents(nc, f"acp-{uuid.uuid4().hex[:10]}") as ev:
            await ev.publish("start", start_body("hi", agent="/bin/sh"))
            ended = await ev.wait_for("run.ended", timeout=60)
            error = next(e for e in ev.events if e["kind"] == "error")
    assert ended["status"] == "failed"
    assert error["code"] == "unknown_agent" and "claude" in error["message"]
    assert not agent_requests(fake)
