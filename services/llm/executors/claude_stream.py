"""Claude Code's stream-json output as executor events (pure: no process, no I/O).

`claude -p --output-format stream-json --verbose --include-partial-messages` writes one
JSON object per line:

- `system` `init` (the session id, the tools, the MCP servers' status), `status`,
  `compact_boundary` (`compact_metadata.pre_tokens`: it compacted its context);
- `stream_event`: the Messages API's own stream events of each call (text deltas,
  `message_start` with the call's input usage, `message_delta` with its output usage);
- `assistant`: the call's content blocks, one line per block or several, all with the
  call's `message.id` (the call is complete at its `message_stop`, or when another line
  follows: its message is reported then, followed by its tool calls);
- `user`: tool results, `tool_result` blocks with the `tool_use_id` of the call;
- `control_request`: `can_use_tool` (with `--permission-prompt-tool stdio`): the agent
  waits for our `control_response`;
- `result`: the end of the turn (`subtype` `success`, `error_max_turns`,
  `error_max_budget_usd`, `error_during_execution`), with the turn's `usage`,
  `num_turns`, and its cost (`model_usage_since_last_result`, per model; the
  `total_cost_usd` beside it adds up every turn of a resumed session).

Lines of a subagent (`parent_tool_use_id` set: Claude Code's Task tool) are left out:
the agent reports the subagent's work as the Task call's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock, is_block, text_of

from .base import (
    AssistantMessage,
    Compacted,
    ExecutorEvent,
    Finished,
    PermissionRequest,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)

MCP_PREFIX = "mcp__loopwire__"
"""How Claude Code names tool `t` of the MCP server `loopwire` (mcp_bridge.py)."""

STOP_REASONS = {"success": "end_turn", "error_max_turns": "max_turns", "error_max_budget_usd": "budget"}


def loopwire_tool(name: str) -> str | None:
    """The loopwire tool behind an agent's tool name, or None for the agent's own tool."""
    return name[len(MCP_PREFIX):] if name.startswith(MCP_PREFIX) else None


def permission_name(name: str) -> str:
    """The name loopwire's permissions know a tool by: its own name for a loopwire tool."""
    return loopwire_tool(name) or name


def usage_of(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}
    return Usage(input_tokens=int(raw.get("input_tokens") or 0), output_tokens=int(raw.get("output_tokens") or 0),
                 cache_read_input_tokens=int(raw.get("cache_read_input_tokens") or 0),
                 cache_creation_input_tokens=int(raw.get("cache_creation_input_tokens") or 0))


def turn_cost(result: dict[str, Any]) -> float | None:
    """What this turn cost: the sum over `model_usage_since_last_result`, else (an older
    Claude Code) `total_cost_usd`."""
    since = result.get("model_usage_since_last_result")
    if isinstance(since, dict) and since:
        costs = [m.get("costUSD") for m in since.values() if isinstance(m, dict)]
        if all(isinstance(c, int | float) for c in costs):
            return float(sum(costs))  # type: ignore[arg-type]
    total = result.get("total_cost_usd")
    return float(total) if isinstance(total, int | float) else None


@dataclass
class _Call:
    """One model call of the agent, as its lines arrive."""

    message_id: str
    model: str | None = None
    blocks: list[ContentBlock] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None


@dataclass
class ClaudeStream:
    """Feed it the lines in order; it returns the events each one completes."""

    session_id: str | None = None
    mcp_status: dict[str, str] = field(default_factory=dict)
    """MCP server name -> its status at start (`connected`, `failed`, ...)."""
    _call: _Call | None = None
    _tool_names: dict[str, str] = field(default_factory=dict)
    _last_usage: Usage = field(default_factory=Usage)
    _text: list[str] = field(default_factory=list)
    """The text of the latest call (the answer when the result carries none)."""
    _calls_seen: int = 0
    """Model calls reported since the last result (its `num_turns` may count one more:
    a turn it refused to start at `--max-turns`)."""

    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        kind = line.get("type")
        if line.get("parent_tool_use_id"):
            return []  # a subagent's own work
        if kind == "system":
            return self._system(line)
        if kind == "stream_event":
            return self._stream_event(line.get("event") or {}, line.get("api_message_id"))
        if kind == "assistant":
            return self._assistant(line.get("message") or {})
        if kind == "user":
            return self._flush() + self._user(line.get("message") or {})
        if kind == "control_request":
            return self._flush() + self._control(line)
        if kind == "result":
            return self._flush() + [self._result(line)]
        return []

    def flush(self) -> list[ExecutorEvent]:
        """The call in progress as a message (the stream ended without a result)."""
        return self._flush()

    # -- lines --------------------------------------------------------------------------------
    def _system(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        subtype = line.get("subtype")
        if subtype == "init":
            self.session_id = str(line.get("session_id") or "") or None
            for server in line.get("mcp_servers") or []:
                if isinstance(server, dict) and server.get("name"):
                    self.mcp_status[str(server["name"])] = str(server.get("status") or "")
            return [SessionStarted(self.session_id)] if self.session_id else []
        if subtype == "compact_boundary":
            meta = line.get("compact_metadata") or {}
            after = meta.get("post_tokens")
            return [Compacted(tokens_before=int(meta.get("pre_tokens") or 0),
                              tokens_after=int(after) if isinstance(after, int) else None,
                              trigger=str(meta.get("trigger") or "auto"))]
        return []

    def _stream_event(self, event: dict[str, Any], message_id: str | None) -> list[ExecutorEvent]:
        etype = event.get("type")
        out: list[ExecutorEvent] = []
        if etype == "message_start":
            message = event.get("message") or {}
            out = self._begin(str(message.get("id") or message_id or ""), message.get("model"))
            assert self._call is not None
            self._call.usage = usage_of(message.get("usage"))
        elif etype == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                out.append(TextDelta(str(delta["text"])))
        elif etype == "message_stop":
            out = self._flush()
        elif etype == "message_delta" and self._call is not None:
            reported = usage_of(event.get("usage"))
            usage = self._call.usage
            # message_delta's usage is cumulative: its output count is the call's total.
            self._call.usage = Usage(
                input_tokens=reported.input_tokens or usage.input_tokens, output_tokens=reported.output_tokens,
                cache_read_input_tokens=reported.cache_read_input_tokens or usage.cache_read_input_tokens,
                cache_creation_input_tokens=reported.cache_creation_input_tokens or usage.cache_creation_input_tokens)
            self._call.stop_reason = (event.get("delta") or {}).get("stop_reason") or self._call.stop_reason
        return out

    def _assistant(self, message: dict[str, Any]) -> list[ExecutorEvent]:
        out = self._begin(str(message.get("id") or ""), message.get("model"))
        call = self._call
        assert call is not None
        if not call.usage.input_tokens and not call.usage.output_tokens:
            call.usage = usage_of(message.get("usage"))  # no partial messages: the line's own
        call.blocks.extend(b for b in message.get("content") or [] if is_block(b))
        return out

    def _user(self, message: dict[str, Any]) -> list[ExecutorEvent]:
        content = message.get("content")
        out: list[ExecutorEvent] = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tool_use_id = str(block.get("tool_use_id"))
                name = self._tool_names.get(tool_use_id, "")
                out.append(ToolResult(tool_use_id=tool_use_id, name=name, content=_content(block.get("content")),
                                      is_error=bool(block.get("is_error")), loopwire_tool=loopwire_tool(name)))
        return out

    def _control(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        request = line.get("request") or {}
        if request.get("subtype") != "can_use_tool":
            return []
        name = str(request.get("tool_name") or "")
        return [PermissionRequest(request_id=str(line.get("request_id")),
                                  tool_use_id=str(request.get("tool_use_id") or line.get("request_id")),
                                  name=permission_name(name), input=dict(request.get("input") or {}))]

    def _result(self, line: dict[str, Any]) -> Finished:
        subtype = str(line.get("subtype") or "")
        text = line.get("result")
        if not isinstance(text, str):
            text = "".join(self._text)
        usage = usage_of(line.get("usage"))
        is_error = bool(line.get("is_error")) and subtype not in STOP_REASONS
        turns, self._calls_seen = self._calls_seen or int(line.get("num_turns") or 0), 0
        return Finished(text=text, usage=usage, cost_usd=turn_cost(line), turns=turns,
                        stop_reason=STOP_REASONS.get(subtype, "end_turn" if not is_error else "error"),
                        agent_session=str(line.get("session_id") or self.session_id or "") or None,
                        context_tokens=self._last_usage.total_input() + self._last_usage.output_tokens,
                        is_error=is_error, error=(text or subtype) if is_error else None)

    # -- the call in progress ---------------------------------------------------------------
    def _begin(self, message_id: str, model: Any) -> list[ExecutorEvent]:
        """The lines of call `message_id` start or go on; a new id ends the call before."""
        if self._call is not None and self._call.message_id == message_id:
            return []
        out = self._flush()
        self._call = _Call(message_id=message_id, model=str(model) if model else None)
        return out

    def _flush(self) -> list[ExecutorEvent]:
        call, self._call = self._call, None
        if call is None or not call.blocks:
            return []
        self._last_usage = call.usage
        self._calls_seen += 1
        self._text = [text_of(call.blocks)]
        stop = call.stop_reason or ("tool_use" if any(b.get("type") == "tool_use" for b in call.blocks) else "end_turn")
        out: list[ExecutorEvent] = [AssistantMessage(message={"role": "assistant", "content": call.blocks},
                                                     model=call.model, usage=call.usage, stop_reason=stop)]
        for block in call.blocks:  # the calls after their message, as in any transcript
            if block.get("type") == "tool_use":
                name = str(block.get("name") or "")
                self._tool_names[str(block.get("id"))] = name
                out.append(ToolCall(tool_use_id=str(block.get("id")), name=name,
                                    input=dict(block.get("input") or {}), loopwire_tool=loopwire_tool(name)))
        return out


def _content(raw: Any) -> str | list[ContentBlock]:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return [b for b in raw if is_block(b)]
    return "" if raw is None else str(raw)
