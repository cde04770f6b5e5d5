"""`codex exec --json` lines as executor events (a pure mapping: line in, events out).

The lines (Codex 0.171; `exec_events.rs` in Codex's source names them):

    {"type":"thread.started","thread_id":"0199…"}           -> SessionStarted
    {"type":"turn.started"}
    {"type":"item.started","item":{"id":"item_1","type":"command_execution",
        "command":"/bin/bash -lc 'ls'","status":"in_progress"}}   -> ToolCall exec_command
    {"type":"item.completed","item":{… "aggregated_output":"a\\n","exit_code":0,
        "status":"completed"}}                                   -> ToolResult
    {"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done."}}
                                                                 -> TextDelta, the turn's text
    {"type":"turn.completed","usage":{"input_tokens":9810,"cached_input_tokens":0,
        "output_tokens":5,"reasoning_output_tokens":0}}          -> AssistantMessage…, Finished
    {"type":"turn.failed","error":{"message":"…"}}               -> Finished(is_error)

Items: `agent_message` (the answer, whole: Codex streams no text deltas in this mode),
`reasoning` (not reported), `command_execution` (its tool `exec_command`), `file_change`
(`apply_patch`, reported once it is applied), `mcp_tool_call` (`mcp__<server>__<tool>`; a
tool of the run's own MCP server is a loopwire tool, reported by the tools service),
`web_search`, `collab_tool_call` (sub-agents), `todo_list` (-> PlanUpdated), `error` (a
warning such as unknown model metadata: logged, not an error of the turn).

Codex reports neither its model calls nor their usage one by one here: the assistant turns
are rebuilt from the items (a turn is the text and the tool calls before the next model
call, which starts when an item follows finished tool calls), and the usage is the exec
turn's total. Codex's `input_tokens` include the cached ones (OpenAI's convention);
loopwire's exclude them (`cache_read_input_tokens` holds those).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock, is_block, is_text, text_of

from .base import (
    AssistantMessage,
    ExecutorEvent,
    Finished,
    PlanUpdated,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)

log = logging.getLogger("loopwire.llm.executors.codex")

SHELL_TOOL = "exec_command"
PATCH_TOOL = "apply_patch"
SEARCH_TOOL = "web_search"


def usage_of(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}
    total_in = int(raw.get("input_tokens") or 0)
    cached = min(total_in, int(raw.get("cached_input_tokens") or 0))
    return Usage(input_tokens=total_in - cached, cache_read_input_tokens=cached,
                 cache_creation_input_tokens=int(raw.get("cache_write_input_tokens") or 0),
                 output_tokens=int(raw.get("output_tokens") or 0))


def _mcp_text(result: Any) -> str | list[ContentBlock]:
    """An MCP result's content as a tool result: its text, or its blocks when not all text."""
    content = (result or {}).get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return ""
    if all(is_text(b) for b in content):
        return text_of(content)
    return [b for b in content if is_block(b)]


class CodexStream:
    """Feed it the lines of one `codex exec` process; it keeps what spans lines (the
    assistant turn being rebuilt, the text of each message item already reported)."""

    def __init__(self, mcp_server: str | None = None, model: str | None = None) -> None:
        self.mcp_server = mcp_server
        """The name the run's loopwire MCP server has in Codex's `mcp_servers`."""
        self.model = model
        self.thread_id: str | None = None
        self.turns = 0
        self.last_text = ""
        self.error: str | None = None
        self._content: list[ContentBlock] = []
        """The assistant turn being rebuilt (Messages-format blocks)."""
        self._open_calls: set[str] = set()
        self._results_seen = False
        """A tool result arrived in this turn: the next item belongs to the next model call."""
        self._said: dict[str, str] = {}
        """item id -> text of that message item reported so far."""
        self._tag = ""

    def new_process(self) -> None:
        """Codex numbers the items of each process from `item_0`: the ids loopwire reports
        (tool_use ids) get a tag of the process, so no two calls of a session share one."""
        self._tag = f"cx{uuid.uuid4().hex[:10]}_"
        self._open_calls.clear()
        self._said.clear()

    # -- the assistant turns --------------------------------------------------------------
    def _maybe_next_turn(self) -> list[ExecutorEvent]:
        if self._results_seen and not self._open_calls:
            return self._flush()
        return []

    def _flush(self) -> list[ExecutorEvent]:
        if not self._content:
            self._results_seen = False
            return []
        content, self._content, self._results_seen = self._content, [], False
        self.turns += 1
        has_calls = any(b["type"] == "tool_use" for b in content)
        return [AssistantMessage(message={"role": "assistant", "content": content}, model=self.model,
                                 stop_reason="tool_use" if has_calls else "end_turn")]

    def _call(self, tool_use_id: str, name: str, tool_input: dict[str, Any],
              *, loopwire_tool: str | None = None) -> list[ExecutorEvent]:
        events = self._maybe_next_turn()
        self._open_calls.add(tool_use_id)
        self._content.append({"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input})
        return [*events, ToolCall(tool_use_id=tool_use_id, name=name, input=tool_input, loopwire_tool=loopwire_tool)]

    def _result(self, tool_use_id: str, name: str, content: str | list[ContentBlock], *, is_error: bool,
                loopwire_tool: str | None = None) -> list[ExecutorEvent]:
        self._open_calls.discard(tool_use_id)
        self._results_seen = True
        return [ToolResult(tool_use_id=tool_use_id, name=name, content=content, is_error=is_error,
                           loopwire_tool=loopwire_tool)]

    def _text(self, item_id: str, text: str) -> list[ExecutorEvent]:
        said = self._said.get(item_id, "")
        if not text.startswith(said):  # rewritten, not extended: report it whole again
            said = ""
        events: list[ExecutorEvent] = []
        if len(text) > len(said):
            if not said:
                events += self._maybe_next_turn()
            events.append(TextDelta(text[len(said):]))
        self._said[item_id] = text
        return events

    # -- the lines ----------------------------------------------------------------------------
    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        kind = line.get("type")
        if kind == "thread.started" and isinstance(line.get("thread_id"), str):
            self.thread_id = line["thread_id"]
            return [SessionStarted(self.thread_id)]
        if kind in ("item.started", "item.updated", "item.completed") and isinstance(line.get("item"), dict):
            return self._item(str(kind).split(".", 1)[1], line["item"])
        if kind == "turn.completed":
            usage = usage_of(line.get("usage"))
            events = self._flush()
            return [*events, self.finished(usage)]
        if kind == "turn.failed":
            error = line.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self.error = str(message or self.error or "the turn failed")
            return [*self._flush(), self.finished(Usage(), error=self.error)]
        if kind == "error":
            self.error = str(line.get("message") or "error")
        return []

    def finished(self, usage: Usage, error: str | None = None) -> Finished:
        return Finished(text=self.last_text, usage=usage, cost_usd=None, turns=max(1, self.turns),
                        agent_session=self.thread_id, context_tokens=0, is_error=error is not None, error=error)

    def _item(self, phase: str, item: dict[str, Any]) -> list[ExecutorEvent]:
        item_id = self._tag + str(item.get("id") or "")
        kind = item.get("type")
        done = phase == "completed"
        if kind == "agent_message":
            text = str(item.get("text") or "")
            events = self._text(item_id, text)
            if done:
                if text:
                    self._content.append({"type": "text", "text": text})
                    self.last_text = text
                self._said.pop(item_id, None)
            return events
        # a call is reported when it starts, or when it is done if its start was not seen
        begins = phase == "started" or (done and item_id not in self._open_calls)
        if kind == "command_execution":
            events = self._call(item_id, SHELL_TOOL, {"command": str(item.get("command") or "")}) if begins else []
            if done:
                failed = item.get("status") in ("failed", "declined") or item.get("exit_code") not in (0, None)
                events += self._result(item_id, SHELL_TOOL, str(item.get("aggregated_output") or ""), is_error=failed)
            return events
        if kind == "mcp_tool_call":
            server, tool = str(item.get("server") or ""), str(item.get("tool") or "")
            mine = tool if self.mcp_server is not None and server == self.mcp_server else None
            name = tool if mine else f"mcp__{server}__{tool}"
            arguments = item.get("arguments")
            events = self._call(item_id, name, arguments if isinstance(arguments, dict) else {}, loopwire_tool=mine) if begins else []
            if done:
                error = item.get("error") if isinstance(item.get("error"), dict) else None
                content = str(error.get("message")) if error else _mcp_text(item.get("result"))
                events += self._result(item_id, name, content, is_error=error is not None or item.get("status") == "failed",
                                       loopwire_tool=mine)
            return events
        if kind == "file_change" and done:
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            events = self._call(item_id, PATCH_TOOL, {"changes": changes})
            summary = "\n".join(f"{c.get('kind')} {c.get('path')}" for c in changes)
            return events + self._result(item_id, PATCH_TOOL, summary, is_error=item.get("status") == "failed")
        if kind == "web_search" and done:
            events = self._call(item_id, SEARCH_TOOL, {"query": str(item.get("query") or "")})
            return events + self._result(item_id, SEARCH_TOOL, "", is_error=False)
        if kind == "collab_tool_call":
            name = str(item.get("tool") or "collab")
            events = self._call(item_id, name, {"prompt": item.get("prompt")}) if begins else []
            if done:
                events += self._result(item_id, name, str(item.get("agents_states") or ""),
                                       is_error=item.get("status") == "failed")
            return events
        if kind == "todo_list":
            entries = [{"content": str(t.get("text", "")), "status": "completed" if t.get("completed") else "pending"}
                       for t in item.get("items") or [] if isinstance(t, dict)]
            return [PlanUpdated(entries)]
        if kind == "error":
            log.info("codex: %s", item.get("message"))
        return []
