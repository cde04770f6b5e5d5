"""The `loopwire` command, driven as a subprocess against `loopwire up`, output checked:
runs (rendered, as JSON lines, approvals answered inline), the operator verbs, the
queries, and what it says when NATS or the services do not answer."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import uuid

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer, free_port, start_nats
from tests.e2e.cli_driver import cli_env, loopwire_cli, on_system
from tests.e2e.conftest import ToolProvider, wait_for_tools
from tests.e2e.events import SessionEvents
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.e2e


def sid() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def json_lines(text: str) -> list[dict[str, object]]:
    lines = text.splitlines()
    assert lines, "nothing on stdout"
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("verb", [["sessions"], ["run", "hello"], ["transcript", "s1"], ["approve", "s1"]])
async def test_an_unreachable_nats_gives_one_line_and_a_non_zero_exit(verb: list[str]) -> None:
    result = await loopwire_cli(*verb, nats_url=f"nats://127.0.0.1:{free_port()}", timeout=30)
    assert result.code != 0
    assert result.seconds < 15, f"took {result.seconds:.1f}s"
    assert "Traceback" not in result.err + result.out
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach NATS at nats://127.0.0.1:" in lines[0], result.err
    assert result.out == ""


async def test_run_says_no_services_answer_when_nothing_runs() -> None:
    bare = start_nats(use_docker=False)  # a NATS with no loopwire on it: no stream, no responders
    try:
        result = await loopwire_cli("run", "hello", nats_url=bare.url, timeout=30)
    finally:
        bare.stop()
    assert result.code != 0 and result.seconds < 15
    assert f"no loopwire services answer at {bare.url}" in result.err, result.err
    assert "Traceback" not in result.err


def test_up_says_what_it_is_waiting_for() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "loopwire.cli", "up"], env={**cli_env(url), "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert first.startswith("waiting:") and f"cannot reach NATS at {url}" in first, first


async def test_version() -> None:
    result = await loopwire_cli("--version", nats_url="nats://127.0.0.1:1")
    assert result.code == 0 and result.out.startswith("loopwire 0.")


async def test_run_renders_and_json_lines_parse(system: LoopwireContainer, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Forty-two."}, {"text": "Forty-three."}])
    shown = await on_system(system, "run", "What is 6 * 7?", "--tools", "")
    assert shown.code == 0, shown.err
    assert "assistant ▸ Forty-two." in shown.out and "■ completed" in shown.out

    s = sid()
    result = await on_system(system, "run", "What is 6 * 7 + 1?", "--json", "--session", s, "--tools", "")
    assert result.code == 0, result.err
    events = json_lines(result.out)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run.started" and kinds[-1] == "run.ended"
    assert {e["session_id"] for e in events} == {s}
    assert events[-1]["final_text"] == "Forty-three."
    if shutil.which("jq"):
        jq = await asyncio.create_subprocess_exec("jq", "-r", 'select(.kind == "run.ended") | .status',
                                                  stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, _ = await jq.communicate(result.out.encode())
        assert jq.returncode == 0 and out.decode().strip() == "completed"


async def test_run_asks_inline_and_approve_all_answers_alone(
        system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic, tool_provider: ToolProvider) -> None:
    fake.script("*", [{"text": "Draft one."}, {"text": "Draft two."}])
    asked = await on_system(system, "run", "write a line", "--profile", "turn_by_turn", stdin="shorter please\ny\n")
    assert asked.code == 0, asked.err
    assert asked.err.count("approve?") == 2
    assert "proposes: Draft one." in asked.out and "proposes: Draft two." in asked.out
    assert "■ completed" in asked.out
    assert "shorter please" in fake.message_requests[1]["messages"][-1]["content"][0]["text"]

    await wait_for_tools(nc, {"add"})
    fake.script("*", [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}]},
                      {"text": "The sum is 42."}])
    s = sid()
    result = await on_system(system, "run", "2 + 40?", "--session", s, "--tools", "add", "--permission", "add=approve",
                            "--approve-all")
    assert result.code == 0, result.err
    assert "approved" in result.err and "The sum is 42." in result.out
    assert [c[:2] for c in tool_provider.calls] == [("add", {"a": 2, "b": 40})]


async def test_approve_and_deny_answer_the_open_checkpoint(
        system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Draft one."}, {"text": "Draft two."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "write a line", "profile": "turn_by_turn"})
        first = await ev.wait_for("approval.requested")
        denied = await on_system(system, "deny", s, "--note", "shorter")
        assert denied.code == 0 and first["checkpoint_id"] in denied.err, denied.err
        second = await ev.wait_for("approval.requested", count=2)
        approved = await on_system(system, "approve", s, second["checkpoint_id"])
        assert approved.code == 0, approved.err
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "completed" and ended["final_text"] == "Draft two."
    assert "shorter" in fake.message_requests[1]["messages"][-1]["content"][0]["text"]
    none_open = await on_system(system, "approve", s)
    assert none_open.code == 1 and "has no open checkpoint" in none_open.err


async def test_steer_abort_and_send(system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic,
                                    tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"slow_echo"})
    tool_provider.slow_delay_s = 30
    fake.script("*", [{"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                      {"text": "Echoing again.", "tool_use": [{"name": "slow_echo", "input": {"text": "hi"}}]},
                      {"text": "Hello again."}])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "echo hi", "tools": ["slow_echo"]})
        await asyncio.wait_for(tool_provider.slow_started.wait(), 20)
        steered = await on_system(system, "steer", s, "say it louder")
        assert steered.code == 0, steered.err
        steer = await ev.wait_for("user.message", source="steer")
        assert "say it louder" in [b.get("text") for b in steer["message"]["content"]]
        aborted = await on_system(system, "abort", s, "--reason", "enough")
        assert aborted.code == 0, aborted.err
        ended = await ev.wait_for("run.ended")
        assert (ended["status"], ended.get("reason")) == ("aborted", "enough")
        sent = await on_system(system, "send", s, "and now say hello")
        assert sent.code == 0, sent.err
        second = await ev.wait_for("run.ended", count=2)
    assert second["status"] == "completed" and second["final_text"] == "Hello again."
    assert len(ev.of("run.started")) == 2


async def test_transcript_and_tools(system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic,
                                    tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add"})
    fake.script("*", [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                      {"text": "It is 3."}])
    s = sid()
    assert (await on_system(system, "run", "1 + 2?", "--session", s, "--tools", "add")).code == 0

    readable = await on_system(system, "transcript", s)
    assert readable.code == 0, readable.err
    for expected in ("input ▸ 1 + 2?", "tool ▸ add", "result ◂ 3", "assistant ▸ It is 3.", "■ completed"):
        assert expected in readable.out, (expected, readable.out)

    as_json = await on_system(system, "transcript", s, "--json")
    events = json_lines(as_json.out)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and events[-1]["kind"] == "run.ended"

    unknown = await on_system(system, "transcript", f"nobody-{uuid.uuid4().hex[:6]}")
    assert unknown.code == 1 and "unknown session" in unknown.err and unknown.out == ""

    tools = await on_system(system, "tools")
    assert tools.code == 0 and "add" in tools.out and "Add two numbers." in tools.out
    listed = {t["name"] for t in json_lines((await on_system(system, "tools", "--json")).out)}
    assert {"add", "slow_echo"} <= listed


async def test_the_offline_model_names_itself_has_no_cost_and_unknown_tools_are_warned_of() -> None:
    # `loopwire up` with no API key: the offline demo model, as a new user first meets it.
    with LoopwireContainer(env={"LOOPWIRE_LLM_PROVIDER": "scripted", "LOOPWIRE_TOOL_MODULES": "loopwire.demo.tools",
                                "LOOPWIRE_ACK_WAIT_S": "3"}) as offline:
        result = await on_system(offline, "run", "What is 6 * 7?", "--tools", "calculator,nosuchtool", "--json")
        shown = await on_system(offline, "run", "What is 6 * 7?", "--tools", "calculator")
    assert result.code == 0, result.err
    events = json_lines(result.out)
    (warning,) = [e for e in events if e["kind"] == "warning"]
    assert warning["code"] == "unknown_tools" and warning["tools"] == ["nosuchtool"]
    assert {e["model"] for e in events if e["kind"] == "message"} == {"loopwire-demo"}
    ended = events[-1]
    assert ended["kind"] == "run.ended" and ended["cost_usd"] is None and "42" in ended["final_text"]
    assert shown.code == 0 and "cost unknown" in shown.out and "$0.000000" not in shown.out


async def test_sessions_lists_them_with_status_tokens_and_cost(system: LoopwireContainer, nc: NatsClient,
                                                               fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "Listed."}, {"text": "Draft."}])
    done, waiting = sid(), sid()
    assert (await on_system(system, "run", "hi", "--session", done, "--tools", "")).code == 0
    async with SessionEvents(nc, waiting) as ev:
        await ev.publish("start", {"input": "write a line", "profile": "turn_by_turn"})
        await ev.wait_for("approval.requested")

    table = await on_system(system, "sessions")
    assert table.code == 0, table.err
    row = next(line for line in table.out.splitlines() if done in line)
    assert "idle" in row and "agentic" in row and " in / " in row and "$" in row
    asking = next(line for line in table.out.splitlines() if waiting in line)
    assert "review" in asking and asking.count("awaiting_approval") == 2, "status, phase and activity"

    rows = json_lines((await on_system(system, "sessions", "--status", "awaiting_approval", "--json")).out)
    assert waiting in {r["session_id"] for r in rows} and done not in {r["session_id"] for r in rows}
    assert all(r["status"] == "awaiting_approval" for r in rows)
    assert [(r["phase"], r["activity"]) for r in rows if r["session_id"] == waiting] == [("review", "awaiting_approval")]
    assert (await on_system(system, "deny", waiting)).code == 0
