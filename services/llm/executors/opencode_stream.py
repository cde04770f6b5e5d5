"""`opencode run --format json` lines as executor events (a pure mapping: line in, events out).

Every line names the session (`sessionID`) and carries one `part` of the session's
current message (opencode 1.18):

    {"type":"step_start","sessionID":"ses_…","part":{"type":"step-start",…}}
    {"type":"text","sessionID":"ses_…","part":{"type":"text","text":"Hello","time":{…}}}
    {"type":"tool_use","sessionID":"ses_…","part":{"type":"tool","tool":"bash","callID":"call_1",
        "state":{"status":"completed","input":{…},"output":"…","metadata":{"exit":0}}}}
    {"type":"step_finish","sessionID":"ses_…","part":{"type":"step-finish","reason":"tool-calls",
        "tokens":{"input":8504,"output":6,"reasoning":0,"cache":{"write":0,"read":0}},"cost":0}}
    {"type":"error","sessionID":"ses_…","error":{"name":"APIError","data":{"message":"…"}}}

A step is one model call: `step_start` … `step_finish` becomes one AssistantMessage with
that call's usage. A text part arrives once it is complete (one TextDelta per part); a
tool arrives once it has finished (`completed` or `error`: ToolCall and ToolResult at
once). The run's loopwire tools are the tools of its MCP server, which opencode names
`<server>_<tool>`. opencode's `tokens.input` excludes the cached tokens, as loopwire's
usage does; its `reasoning` tokens are output. It prices each step itself (`cost`, 0 for
a model without a price in its catalog).
"""

from __future__ import annotations

import re
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock, text_of

from .base import AssistantMessage, ExecutorEvent, Finished, SessionStarted, TextDelta, ToolCall, ToolResult


def mcp_tool_name(server: str, tool: str) -> str:
    """What opencode calls tool `tool` of MCP server `server` (both sanitized)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", server) + "_" + re.sub(r"[^a-zA-Z0-9_-]", "_", tool)


def usage_of(tokens: Any) -> Usage:
    tokens = _dict(tokens)
    cache = _dict(tokens.get("cache"))
    return Usage(input_tokens=int(tokens.get("input") or 0),
                 output_tokens=int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0),
                 cache_read_input_tokens=int(cache.get("read") or 0),
                 cache_creation_input_tokens=int(cache.get("write") or 0))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error or "error")
    data = error.get("data")
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(error.get("name") or "error")


class OpencodeStream:
    """Feed it the lines of one `opencode run` process."""

    def __init__(self, loopwire_tools: dict[str, str] | None = None, model: str | None = None) -> None:
        self.loopwire_tools = dict(loopwire_tools or {})
        """opencode's name of each loopwire tool -> the tool's own name."""
        self.model = model
        self.session_id: str | None = None
        self.usage = Usage()
        self.cost: float | None = None
        self.turns = 0
        self.last_text = ""
        self.context_tokens = 0
        self.error: str | None = None
        self._content: list[ContentBlock] = []

    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        events: list[ExecutorEvent] = []
        session = line.get("sessionID")
        if isinstance(session, str) and session and self.session_id is None:
            self.session_id = session
            events.append(SessionStarted(session))
        kind = line.get("type")
        part = _dict(line.get("part"))
        if kind == "step_start":
            self._content = []
        elif kind == "text":
            text = str(part.get("text") or "")
            if text:
                self._content.append({"type": "text", "text": text})
                events.append(TextDelta(text))
        elif kind == "tool_use":
            events += self._tool(part)
        elif kind == "step_finish":
            events.append(self._step(part))
        elif kind == "error":
            self.error = _error_text(line.get("error"))
        return events

    def _tool(self, part: dict[str, Any]) -> list[ExecutorEvent]:
        name = str(part.get("tool") or "")
        tool_use_id = str(part.get("callID") or part.get("id") or "")
        state = _dict(part.get("state"))
        tool_input = _dict(state.get("input"))
        mine = self.loopwire_tools.get(name)
        self._content.append({"type": "tool_use", "id": tool_use_id, "name": mine or name, "input": tool_input})
        exit_code = _dict(state.get("metadata")).get("exit")
        failed = state.get("status") == "error" or exit_code not in (None, 0)  # bash: its command's exit
        output = state.get("error") if state.get("status") == "error" else state.get("output")
        return [ToolCall(tool_use_id=tool_use_id, name=mine or name, input=tool_input, loopwire_tool=mine),
                ToolResult(tool_use_id=tool_use_id, name=mine or name, content=str(output or ""), is_error=failed,
                           loopwire_tool=mine)]

    def _step(self, part: dict[str, Any]) -> AssistantMessage:
        usage = usage_of(part.get("tokens"))
        self.usage = self.usage + usage
        if isinstance(part.get("cost"), int | float):
            self.cost = (self.cost or 0.0) + float(part["cost"])
        self.turns += 1
        self.context_tokens = usage.total_input() + usage.output_tokens
        content, self._content = self._content, []
        text = text_of(content)
        if text.strip():
            self.last_text = text
        calls = part.get("reason") == "tool-calls" or any(b["type"] == "tool_use" for b in content)
        return AssistantMessage(message={"role": "assistant", "content": content}, model=self.model, usage=usage,
                                stop_reason="tool_use" if calls else "end_turn")

    def finished(self) -> Finished:
        """The step's end, once the process has ended: an error event, or no model call at
        all, is a failed turn."""
        error = self.error if self.error is not None else (None if self.turns else "opencode made no model call")
        return Finished(text=self.last_text, usage=self.usage, cost_usd=self.cost, turns=max(1, self.turns),
                        agent_session=self.session_id, context_tokens=self.context_tokens,
                        is_error=error is not None, error=error)
