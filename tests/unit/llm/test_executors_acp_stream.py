"""An ACP agent's session updates as executor events: the notifications claude-code-acp
0.16.2 sent for a Bash call (seen on this machine: the call twice, its input the second
time, then two updates), its plan, and the turn's end."""

from __future__ import annotations

import pytest

from loopwire.llm.executors.acp_stream import AcpStream
from loopwire.llm.executors.base import (
    AssistantMessage,
    Finished,
    PlanUpdated,
    TextDelta,
    ToolCall,
    ToolResult,
)

pytestmark = pytest.mark.unit

META = {"claudeCode": {"toolName": "Bash"}}
BASH_TURN = [
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Making it. "}},
    {"sessionUpdate": "tool_call", "toolCallId": "toolu_1", "title": "Terminal", "kind": "execute",
     "status": "pending", "content": [], "rawInput": {}, "_meta": META},
    {"sessionUpdate": "tool_call", "toolCallId": "toolu_1", "title": "`touch x`", "kind": "execute",
     "status": "pending", "rawInput": {"command": "touch x"}, "_meta": META},
    {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "_meta": {"claudeCode": {
        "toolName": "Bash", "toolResponse": {"stdout": ""}}}},
    {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "status": "completed", "rawOutput": "done",
     "_meta": META},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Made it."}},
]


def test_a_tool_round_then_the_answer() -> None:
    stream = AcpStream()
    events = [e for u in BASH_TURN for e in stream.feed(u)]
    finished = stream.finished("end_turn", None, "sess-1")
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["TextDelta", "AssistantMessage", "ToolCall", "ToolResult", "TextDelta"]
    message, call, result = events[1], events[2], events[3]
    assert isinstance(message, AssistantMessage) and message.message["content"] == [
        {"type": "text", "text": "Making it. "},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "touch x"}}]
    assert isinstance(call, ToolCall) and (call.name, call.input) == ("Bash", {"command": "touch x"})
    assert isinstance(result, ToolResult) and (result.content, result.is_error) == ("done", False)
    assert isinstance(events[4], TextDelta) and events[4].text == "Made it."
    assert isinstance(finished, Finished) and finished.text == "Made it." and finished.turns == 2
    assert finished.agent_session == "sess-1" and finished.stop_reason == "end_turn"
    assert stream.name_of({"toolCallId": "toolu_1", "title": "`touch x`"}) == "Bash"


def test_a_failed_call_a_plan_usage_and_the_stop_reasons() -> None:
    stream = AcpStream()
    events = [e for u in [
        {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Read", "kind": "read", "status": "in_progress",
         "rawInput": {"path": "/x"}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": "failed",
         "content": [{"type": "content", "content": {"type": "text", "text": "no such file"}}]},
        {"sessionUpdate": "plan", "entries": [{"content": "Look", "status": "completed", "priority": "high"}]},
        {"sessionUpdate": "usage_update", "used": 1200, "size": 200000, "cost": {"amount": 0.02, "currency": "USD"}},
    ] for e in stream.feed(u)]
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error and result.content == "no such file" and result.name == "read"
    (plan,) = [e for e in events if isinstance(e, PlanUpdated)]
    assert plan.entries[0]["content"] == "Look"
    done = stream.finished("max_turn_requests", {"inputTokens": 10, "outputTokens": 3}, "s")
    assert (done.stop_reason, done.cost_usd, done.context_tokens) == ("max_turns", 0.02, 1200)
    assert (done.usage.input_tokens, done.usage.output_tokens) == (10, 3)
    assert AcpStream().finished("refusal", None, "s").is_error
