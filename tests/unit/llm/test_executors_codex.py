"""The codex executor's parts without the agent: its `exec --json` lines (recorded from
Codex 0.171 against tests/fakes/openai_server.py) as executor events, its command line and
environment, the usage read back from its rollout file. The real CLI:
tests/integration/llm/test_executors_cli_agents.py and tests/e2e/test_executor_codex.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwire.llm.executors.base import (
    AssistantMessage,
    ExecutorTask,
    Finished,
    McpEndpoint,
    PlanUpdated,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)
from loopwire.llm.executors.codex import CodexExecutor, last_token_count, rollout_file
from loopwire.llm.executors.codex_stream import CodexStream, usage_of
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ToolSpec, Usage

pytestmark = pytest.mark.unit

# `codex exec --json` answering "look for nope": text and a loopwire tool over MCP in one
# model call, a failing command in the next, the answer in the last.
RECORDED = """\
{"type":"thread.started","thread_id":"01a2332f-f2bd-7bc1-9059-1a0dea992988"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `gpt-test` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Checking."}}
{"type":"item.started","item":{"id":"item_2","type":"mcp_tool_call","server":"loopwire","tool":"echo","arguments":{"text":"ping"},"result":null,"error":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_2","type":"mcp_tool_call","server":"loopwire","tool":"echo","arguments":{"text":"ping"},"result":{"content":[{"type":"text","text":"echo: ping"}],"structured_content":{"result":"echo: ping"}},"error":null,"status":"completed"}}
{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"/bin/bash -lc 'ls nope'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"/bin/bash -lc 'ls nope'","aggregated_output":"ls: cannot access 'nope': No such file or directory\\n","exit_code":2,"status":"failed"}}
{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"The file is missing."}}
{"type":"turn.completed","usage":{"input_tokens":32859,"cached_input_tokens":859,"cache_write_input_tokens":0,"output_tokens":21,"reasoning_output_tokens":0}}
"""

FAILED = """\
{"type":"thread.started","thread_id":"01a23330-02a5-79e2-8eb0-d6fa85a493ac"}
{"type":"turn.started"}
{"type":"error","message":"{\\"error\\": {\\"message\\": \\"model gpt-bad does not exist\\"}}"}
{"type":"turn.failed","error":{"message":"{\\"error\\": {\\"message\\": \\"model gpt-bad does not exist\\"}}"}}
"""


def feed(stream: CodexStream, text: str) -> list[object]:
    stream.new_process()
    return [event for line in text.splitlines() for event in stream.feed(json.loads(line))]


def test_a_recorded_turn_becomes_text_tools_turns_and_the_end() -> None:
    events = feed(CodexStream(mcp_server="loopwire", model="gpt-test"), RECORDED)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SessionStarted", "TextDelta", "ToolCall", "ToolResult", "AssistantMessage",
                     "ToolCall", "ToolResult", "AssistantMessage", "TextDelta", "AssistantMessage", "Finished"]
    assert events[0] == SessionStarted("01a2332f-f2bd-7bc1-9059-1a0dea992988")
    assert events[1] == TextDelta("Checking.")
    call, result = events[2], events[3]
    assert isinstance(call, ToolCall) and isinstance(result, ToolResult)
    assert (call.name, call.input, call.loopwire_tool) == ("echo", {"text": "ping"}, "echo")
    assert (result.content, result.is_error, result.tool_use_id) == ("echo: ping", False, call.tool_use_id)
    first = events[4]
    assert isinstance(first, AssistantMessage) and first.stop_reason == "tool_use"
    assert first.message["content"] == [{"type": "text", "text": "Checking."},
                                        {"type": "tool_use", "id": call.tool_use_id, "name": "echo",
                                         "input": {"text": "ping"}}]
    shell, shell_result = events[5], events[6]
    assert isinstance(shell, ToolCall) and shell.name == "exec_command" and shell.loopwire_tool is None
    assert shell.input == {"command": "/bin/bash -lc 'ls nope'"}
    assert isinstance(shell_result, ToolResult) and shell_result.is_error and "No such file" in str(shell_result.content)
    last = events[9]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "end_turn"
    assert last.message["content"] == [{"type": "text", "text": "The file is missing."}]
    finished = events[-1]
    assert isinstance(finished, Finished) and not finished.is_error
    assert finished.text == "The file is missing." and finished.turns == 3
    assert finished.agent_session == "01a2332f-f2bd-7bc1-9059-1a0dea992988"
    # OpenAI counts cached tokens inside input_tokens; loopwire apart
    assert finished.usage == Usage(input_tokens=32000, cache_read_input_tokens=859, output_tokens=21)


def test_tool_use_ids_are_unique_across_processes_of_a_session() -> None:
    stream = CodexStream(mcp_server="loopwire")
    first = [e.tool_use_id for e in feed(stream, RECORDED) if isinstance(e, ToolCall)]
    second = [e.tool_use_id for e in feed(stream, RECORDED) if isinstance(e, ToolCall)]
    assert len(set(first + second)) == 4  # Codex numbers every process's items from item_0


def test_a_tool_of_another_mcp_server_is_the_agents_own() -> None:
    events = feed(CodexStream(mcp_server="loopwire"), RECORDED.replace('"server":"loopwire"', '"server":"docs"'))
    call = next(e for e in events if isinstance(e, ToolCall))
    assert call.name == "mcp__docs__echo" and call.loopwire_tool is None


def test_a_failed_turn_ends_with_its_error() -> None:
    events = feed(CodexStream(), FAILED)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.is_error
    assert finished.error is not None and "gpt-bad does not exist" in finished.error


def test_file_changes_plans_and_growing_messages() -> None:
    stream = CodexStream()
    stream.new_process()
    lines = [
        {"type": "item.started", "item": {"id": "item_1", "type": "todo_list", "items": [
            {"text": "read", "completed": True}, {"text": "fix", "completed": False}]}},
        {"type": "item.completed", "item": {"id": "item_2", "type": "file_change", "status": "completed",
                                            "changes": [{"path": "a.py", "kind": "update"}]}},
        {"type": "item.updated", "item": {"id": "item_3", "type": "agent_message", "text": "Fixed"}},
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "Fixed a.py."}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 3}},
    ]
    events = [e for line in lines for e in stream.feed(line)]
    assert events[0] == PlanUpdated([{"content": "read", "status": "completed"},
                                     {"content": "fix", "status": "pending"}])
    patch = events[1]
    assert isinstance(patch, ToolCall) and patch.name == "apply_patch"
    assert isinstance(events[2], ToolResult) and events[2].content == "update a.py"
    # the change was the first model call; the message the next one
    assert isinstance(events[3], AssistantMessage)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Fixed", " a.py."]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.turns == 2 and finished.text == "Fixed a.py."


def _task(tmp_path: Path, **over: object) -> ExecutorTask:
    fields: dict[str, object] = dict(
        session_id="s1", run_id="r1", step_id="s1:1", turn=1, profile="codex", model="gpt-x",
        prompt=[{"type": "text", "text": "hi"}], cwd=tmp_path, system="Be brief.\nNo \"quotes\" lost.",
        tools=[ToolSpec(name="add", description="adds", input_schema={"type": "object"})],
        mcp=McpEndpoint(url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer secret-token"}),
        permissions={"exec_command": "deny", "web_search": "approve", "add": "approve", "Read": "auto"},
        env={"PATH": "/usr/bin"})
    fields.update(over)
    return ExecutorTask(**fields)  # type: ignore[arg-type]


def test_the_command_line_carries_the_run_but_no_secret(tmp_path: Path) -> None:
    executor = CodexExecutor(Settings(executor_dir=str(tmp_path / "x")), ["/bin/codex", "-c", "model_provider=p"])
    argv = executor.command(_task(tmp_path))
    assert argv[:3] == ["/bin/codex", "-c", "model_provider=p"]
    assert "secret-token" not in " ".join(argv)
    assert argv[argv.index("exec"):] == ["exec", "--json", "--skip-git-repo-check", "-C", str(tmp_path), "-m",
                                         "gpt-x", "--sandbox", "workspace-write", "-"]
    assert 'developer_instructions="Be brief.\\nNo \\"quotes\\" lost."' in argv
    mcp = next(a for a in argv if a.startswith("mcp_servers.loopwire="))
    assert 'url = "http://127.0.0.1:9/mcp"' in mcp and '"Authorization" = "LOOPWIRE_TOOLS_HEADER_0"' in mcp
    assert "required = true" in mcp and 'default_tools_approval_mode = "approve"' in mcp
    # the agent's own tools denied, or to be approved (no one to ask), are taken from it;
    # `add` is loopwire's, governed where it is served
    assert ["--disable", "shell_tool"] == argv[argv.index("--disable"):argv.index("--disable") + 2]
    assert 'web_search="disabled"' in argv
    env = executor.environment(_task(tmp_path))
    assert env["LOOPWIRE_TOOLS_HEADER_0"] == "Bearer secret-token" and env["PWD"] == str(tmp_path)
    assert env["CODEX_HOME"] == str(tmp_path / "x" / "agents" / "codex")


def test_resume_read_only_and_the_operators_sandbox(tmp_path: Path) -> None:
    executor = CodexExecutor(Settings(executor_dir=str(tmp_path)), ["codex"])
    argv = executor.command(_task(tmp_path, permissions={"apply_patch": "deny"}, mcp=None, system=None), "T-1")
    assert argv[-5:] == ["--sandbox", "read-only", "resume", "T-1", "-"]
    assert not any(a.startswith("mcp_servers") or a.startswith("developer_instructions") for a in argv)
    operator = CodexExecutor(Settings(executor_dir=str(tmp_path)), ["codex", "-c", 'sandbox_mode="danger-full-access"'])
    assert "--sandbox" not in operator.command(_task(tmp_path))


def test_usage_is_the_step_share_of_the_threads_total(tmp_path: Path) -> None:
    home = tmp_path / "home"
    day = home / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    path = day / "rollout-2026-12-01T19-43-00-T-9.jsonl"
    counts = [{"total_token_usage": {"input_tokens": 9967, "output_tokens": 3},
               "last_token_usage": {"input_tokens": 9967, "output_tokens": 3}},
              {"total_token_usage": {"input_tokens": 20008, "cached_input_tokens": 8, "output_tokens": 7},
               "last_token_usage": {"input_tokens": 10041, "output_tokens": 4}}]
    path.write_text("\n".join(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": c}})
                              for c in counts) + "\n" + json.dumps({"type": "event_msg", "payload": {"type": "x"}}) + "\n")
    assert rollout_file(home, "T-9") == path and rollout_file(home, "T-8") is None
    info = last_token_count(path)
    assert info is not None and usage_of(info["total_token_usage"]) == Usage(input_tokens=20000,
                                                                             cache_read_input_tokens=8,
                                                                             output_tokens=7)
    assert last_token_count(None) is None
