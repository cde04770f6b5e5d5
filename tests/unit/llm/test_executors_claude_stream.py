"""Claude Code's stream-json lines as executor events, from a recorded session of the real
CLI (2.1.332: a Bash call that asked permission, then an answer; tests/fakes/
claude_code_bash.jsonl), and the edge cases of the mapping."""

from __future__ import annotations

import json

import pytest

from loopwire.llm.executors.base import (
    AssistantMessage,
    Compacted,
    Finished,
    PermissionRequest,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)
from loopwire.llm.executors.claude_stream import ClaudeStream, loopwire_tool, permission_name, turn_cost
from tests.paths import TESTS

pytestmark = pytest.mark.unit

RECORDED = TESTS / "fakes" / "claude_code_bash.jsonl"


def feed_all(lines: list[dict]) -> list[object]:
    stream = ClaudeStream()
    return [e for line in lines for e in stream.feed(line)]


def test_a_recorded_session_maps_to_the_agents_events_in_order() -> None:
    events = feed_all([json.loads(line) for line in RECORDED.read_text().splitlines()])
    kinds = [type(e).__name__ for e in events if not isinstance(e, TextDelta)]
    assert kinds == ["SessionStarted", "AssistantMessage", "ToolCall", "PermissionRequest", "ToolResult",
                     "AssistantMessage", "Finished"]
    started, first, call, ask, result, second, finished = [e for e in events if not isinstance(e, TextDelta)]
    assert isinstance(started, SessionStarted) and started.agent_session == finished.agent_session
    assert isinstance(first, AssistantMessage) and first.stop_reason == "tool_use"
    assert first.message["content"][0]["name"] == "Bash"
    assert first.usage is not None and first.usage.input_tokens > 0 and first.usage.output_tokens > 1
    assert isinstance(call, ToolCall) and call.name == "Bash" and call.input["command"] == "touch made.txt"
    assert call.loopwire_tool is None
    assert isinstance(ask, PermissionRequest) and ask.tool_use_id == call.tool_use_id and ask.name == "Bash"
    assert ask.input == call.input and ask.request_id
    assert isinstance(result, ToolResult) and result.tool_use_id == call.tool_use_id and result.name == "Bash"
    assert result.is_error is False
    assert isinstance(second, AssistantMessage) and second.message["content"] == [{"type": "text", "text": "Made it."}]
    assert isinstance(finished, Finished) and finished.text == "Made it." and finished.turns == 2
    assert finished.stop_reason == "end_turn" and not finished.is_error
    assert finished.usage.input_tokens > first.usage.input_tokens  # the turn's whole usage
    assert finished.cost_usd is not None and finished.cost_usd > 0
    assert finished.context_tokens == second.usage.total_input() + second.usage.output_tokens  # type: ignore[union-attr]
    texts = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert texts == "Made it."  # the Bash call streamed no text, the answer did


def test_subagent_lines_are_left_out_and_mcp_tools_are_named_as_loopwire_knows_them() -> None:
    events = feed_all([
        {"type": "assistant", "parent_tool_use_id": "toolu_task", "message": {"id": "m0", "content": [
            {"type": "tool_use", "id": "t0", "name": "Bash", "input": {}}]}},
        {"type": "assistant", "message": {"id": "m1", "model": "x", "content": [
            {"type": "tool_use", "id": "t1", "name": "mcp__loopwire__add", "input": {"a": 1}}],
            "usage": {"input_tokens": 5, "output_tokens": 2}}},
        {"type": "control_request", "request_id": "r1", "request": {
            "subtype": "can_use_tool", "tool_name": "mcp__loopwire__add", "input": {"a": 1}, "tool_use_id": "t1"}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1",
                                                  "content": [{"type": "text", "text": "2"}]}]}},
    ])
    message, call, ask, result = events
    assert isinstance(message, AssistantMessage) and message.usage is not None and message.usage.input_tokens == 5
    assert isinstance(call, ToolCall) and call.loopwire_tool == "add" and call.tool_use_id == "t1"
    assert isinstance(ask, PermissionRequest) and ask.name == "add"  # permissions know loopwire's name
    assert isinstance(result, ToolResult) and result.loopwire_tool == "add" and result.content == [
        {"type": "text", "text": "2"}]
    assert (loopwire_tool("Bash"), permission_name("Bash")) == (None, "Bash")


@pytest.mark.parametrize(("subtype", "stop", "error"), [("error_max_turns", "max_turns", False),
                                                        ("error_max_budget_usd", "budget", False),
                                                        ("error_during_execution", "error", True)])
def test_the_results_subtype_says_why_the_agent_stopped(subtype: str, stop: str, error: bool) -> None:
    (finished,) = feed_all([{"type": "result", "subtype": subtype, "is_error": True, "num_turns": 3,
                             "session_id": "s", "usage": {"input_tokens": 9, "output_tokens": 1}}])
    assert isinstance(finished, Finished)
    assert (finished.stop_reason, finished.is_error, finished.turns) == (stop, error, 3)


def test_a_resumed_sessions_cost_is_this_turns_not_the_sessions_total() -> None:
    result = {"total_cost_usd": 0.27, "model_usage_since_last_result": {
        "a": {"costUSD": 0.05}, "b": {"costUSD": 0.01}}}
    assert turn_cost(result) == pytest.approx(0.06)
    assert turn_cost({"total_cost_usd": 0.5}) == 0.5  # an older CLI: its total
    assert turn_cost({}) is None


def test_a_compaction_and_a_result_without_text() -> None:
    events = feed_all([
        {"type": "system", "subtype": "compact_boundary", "compact_metadata": {"trigger": "manual", "pre_tokens": 900}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "partial answer"}]}},
        {"type": "result", "subtype": "success", "num_turns": 1, "usage": {}},
    ])
    compacted, _, finished = events
    assert isinstance(compacted, Compacted) and (compacted.tokens_before, compacted.trigger) == (900, "manual")
    assert isinstance(finished, Finished) and finished.text == "partial answer"
