"""The opencode executor's parts without the agent: its `run --format json` lines (recorded
from opencode 1.18.33 against tests/fakes/openai_server.py) as executor events, its
command line, the per-step configuration in its environment, its session database. The
real CLI: tests/integration/llm/test_executors_cli_agents.py and tests/e2e/test_executor_opencode.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from loopwire.llm.executors.base import (
    AssistantMessage,
    ExecutorTask,
    McpEndpoint,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)
from loopwire.llm.executors.opencode import OpencodeExecutor, merge
from loopwire.llm.executors.opencode_stream import OpencodeStream, mcp_tool_name
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ToolSpec, Usage

pytestmark = pytest.mark.unit

S = "ses_dcccf737effeBiqqNcuuxCuFSE"
# "look for nope": text and the loopwire tool `echo` (over MCP: `loopwire_echo`) in one
# step, a failing command in the next, the answer in the last (ids and times shortened).
RECORDED = f"""\
{{"type":"step_start","timestamp":1,"sessionID":"{S}","part":{{"id":"prt_1","sessionID":"{S}","type":"step-start"}}}}
{{"type":"text","timestamp":2,"sessionID":"{S}","part":{{"id":"prt_2","sessionID":"{S}","type":"text","text":"Checking.","time":{{"start":1,"end":2}}}}}}
{{"type":"tool_use","timestamp":3,"sessionID":"{S}","part":{{"type":"tool","tool":"loopwire_echo","callID":"call_fake_000001_0","state":{{"status":"completed","input":{{"text":"ping"}},"output":"echo: ping","metadata":{{"truncated":false}},"title":""}},"id":"prt_3"}}}}
{{"type":"step_finish","timestamp":4,"sessionID":"{S}","part":{{"id":"prt_4","reason":"tool-calls","type":"step-finish","tokens":{{"total":8523,"input":8513,"output":10,"reasoning":0,"cache":{{"write":0,"read":0}}}},"cost":0}}}}
{{"type":"step_start","timestamp":5,"sessionID":"{S}","part":{{"id":"prt_5","type":"step-start"}}}}
{{"type":"tool_use","timestamp":6,"sessionID":"{S}","part":{{"type":"tool","tool":"bash","callID":"call_fake_000002_0","state":{{"status":"completed","input":{{"command":"ls nope","description":"list"}},"output":"ls: cannot access 'nope': No such file or directory\\n","metadata":{{"exit":2,"truncated":false}},"title":"ls nope"}},"id":"prt_6"}}}}
{{"type":"step_finish","timestamp":7,"sessionID":"{S}","part":{{"id":"prt_7","reason":"tool-calls","type":"step-finish","tokens":{{"total":8588,"input":8575,"output":13,"reasoning":0,"cache":{{"write":0,"read":0}}}},"cost":0}}}}
{{"type":"step_start","timestamp":8,"sessionID":"{S}","part":{{"id":"prt_8","type":"step-start"}}}}
{{"type":"text","timestamp":9,"sessionID":"{S}","part":{{"id":"prt_9","type":"text","text":"The file is missing.","time":{{"start":8,"end":9}}}}}}
{{"type":"step_finish","timestamp":10,"sessionID":"{S}","part":{{"id":"prt_10","reason":"stop","type":"step-finish","tokens":{{"total":8656,"input":8151,"output":3,"reasoning":2,"cache":{{"write":0,"read":500}}}},"cost":0.0125}}}}
"""

FAILED = f"""\
{{"type":"error","timestamp":1,"sessionID":"{S}","error":{{"name":"APIError","data":{{"message":"model m does not exist","statusCode":400,"isRetryable":false}}}}}}
"""


def feed(stream: OpencodeStream, text: str) -> list[object]:
    return [event for line in text.splitlines() for event in stream.feed(json.loads(line))]


def test_a_recorded_run_becomes_steps_with_their_usage() -> None:
    stream = OpencodeStream({"loopwire_echo": "echo"}, model="fake/m")
    events = feed(stream, RECORDED)
    assert [type(e).__name__ for e in events] == [
        "SessionStarted", "TextDelta", "ToolCall", "ToolResult", "AssistantMessage", "ToolCall", "ToolResult",
        "AssistantMessage", "TextDelta", "AssistantMessage"]
    assert events[0] == SessionStarted(S) and events[1] == TextDelta("Checking.")
    call, result = events[2], events[3]
    assert isinstance(call, ToolCall) and (call.name, call.loopwire_tool, call.input) == ("echo", "echo",
                                                                                          {"text": "ping"})
    assert isinstance(result, ToolResult) and result.content == "echo: ping" and not result.is_error
    first = events[4]
    assert isinstance(first, AssistantMessage) and first.stop_reason == "tool_use"
    assert first.usage == Usage(input_tokens=8513, output_tokens=10)
    assert first.message["content"][1] == {"type": "tool_use", "id": "call_fake_000001_0", "name": "echo",
                                           "input": {"text": "ping"}}
    bash = events[6]
    assert isinstance(bash, ToolResult) and bash.name == "bash" and bash.is_error  # its command exited 2
    last = events[9]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "end_turn"
    assert last.usage == Usage(input_tokens=8151, output_tokens=5, cache_read_input_tokens=500)
    finished = stream.finished()
    assert not finished.is_error and finished.text == "The file is missing." and finished.turns == 3
    assert finished.usage == Usage(input_tokens=8513 + 8575 + 8151, output_tokens=10 + 13 + 5,
                                   cache_read_input_tokens=500)
    assert finished.cost_usd == pytest.approx(0.0125) and finished.agent_session == S
    assert finished.context_tokens == 8151 + 500 + 5


def test_an_error_line_or_no_model_call_is_a_failed_turn() -> None:
    stream = OpencodeStream()
    assert feed(stream, FAILED) == [SessionStarted(S)]
    finished = stream.finished()
    assert finished.is_error and finished.error == "model m does not exist"
    silent = OpencodeStream().finished()
    assert silent.is_error and silent.error == "opencode made no model call" and silent.cost_usd is None


def test_mcp_tool_names_are_sanitized_as_opencode_does() -> None:
    assert mcp_tool_name("loopwire", "add") == "loopwire_add"
    assert mcp_tool_name("loop wire", "files.read") == "loop_wire_files_read"


def _task(tmp_path: Path, **over: object) -> ExecutorTask:
    fields: dict[str, object] = dict(
        session_id="s1", run_id="r1", step_id="s1:1", turn=1, profile="opencode", model="fake/m",
        prompt=[{"type": "text", "text": "hi"}], cwd=tmp_path, system="Be brief.", scratch=tmp_path,
        tools=[ToolSpec(name="add", description="adds", input_schema={"type": "object"})],
        mcp=McpEndpoint(url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer secret-token"}),
        permissions={"bash": "deny", "write": "approve", "add": "approve", "read": "auto"}, max_turns=4,
        env={"PATH": "/usr/bin", "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"p": {"npm": "x"}},
                                                                        "permission": {"read": "allow"}}),
             "OPENCODE_DISABLE_MODELS_FETCH": "0"})
    fields.update(over)
    return ExecutorTask(**fields)  # type: ignore[arg-type]


def test_the_step_is_configured_in_the_environment_not_on_the_command_line(tmp_path: Path) -> None:
    executor = OpencodeExecutor(Settings(executor_dir=str(tmp_path / "x")), ["/bin/opencode", "--pure"])
    task = _task(tmp_path)
    assert executor.command(task, None) == ["/bin/opencode", "--pure", "run", "--format", "json", "-m", "fake/m",
                                            "--title", "loopwire s1"]
    assert executor.command(task, "ses_1")[-2:] == ["--session", "ses_1"]
    instructions = tmp_path / "system.md"
    env = executor.environment(task, instructions)
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"] == {"p": {"npm": "x"}}  # the operator's own, kept under the step's
    # bash denied, write to be approved (opencode run cannot wait: it refuses), and write is
    # checked as edit; `add` is a loopwire tool, governed where it is served
    assert config["permission"] == {"read": "allow", "bash": "deny", "write": "deny", "edit": "deny"}
    assert config["mcp"]["loopwire"] == {"type": "remote", "url": "http://127.0.0.1:9/mcp",
                                         "headers": {"Authorization": "Bearer secret-token"}, "oauth": False,
                                         "enabled": True, "timeout": 60000}
    assert config["instructions"] == [str(instructions)] and config["agent"] == {"build": {"steps": 4}}
    assert config["share"] == "disabled" and config["autoupdate"] is False
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "0" and env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert env["OPENCODE_DB"] == str(tmp_path / "x" / "agents" / "opencode" / "opencode.db")
    assert env["PWD"] == str(tmp_path)
    assert OpencodeStream(executor.loopwire_tools(task)).loopwire_tools == {"loopwire_add": "add"}


def test_a_session_is_reachable_when_its_database_holds_it(tmp_path: Path) -> None:
    executor = OpencodeExecutor(Settings(executor_dir=str(tmp_path)), ["opencode"])
    assert not executor.session_reachable(S, tmp_path)
    executor.database.parent.mkdir(parents=True)
    with sqlite3.connect(executor.database) as db:
        db.execute("create table session (id text primary key, directory text)")
        db.execute("insert into session values (?, ?)", (S, str(tmp_path)))
    assert executor.session_reachable(S, tmp_path)
    assert not executor.session_reachable("ses_other", tmp_path)


def test_merge_goes_key_by_key() -> None:
    assert merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"c": 3}, "d": {"e": 1}}) == {"a": {"b": 1, "c": 3},
                                                                                    "d": {"e": 1}}

