"""An ACP agent's `session/update` notifications as executor events (pure: no I/O).

The Agent Client Protocol reports a prompt turn as notifications (each update a JSON
object, here as its wire form, camelCase):

- `agent_message_chunk` (`content.text`): the agent's text, as it comes;
- `tool_call` (`toolCallId`, `title`, `kind`, `status`, `rawInput`; Claude Code's agent
  names its tool in `_meta.claudeCode.toolName` and sends the call twice, the second
  time with its input), `tool_call_update` (`status` `completed` / `failed`, `rawOutput`,
  `content`);
- `plan` (`entries`: `content`, `status`, `priority`);
- `usage_update` (`used`, `size`: the context; `cost`), when the agent reports them;

and answers `session/prompt` with its `stopReason` (and, unstable, its `usage`). ACP has
no message per model call: a turn's text up to its first tool call is reported as one
assistant message with that call, and each round of text after tool results as the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock

from .base import AssistantMessage, ExecutorEvent, Finished, PlanUpdated, TextDelta, ToolCall, ToolResult
from .claude_stream import loopwire_tool

STOP_REASONS = {"end_turn": "end_turn", "max_turn_requests": "max_turns", "max_tokens": "max_tokens",
                "refusal": "refusal", "cancelled": "cancelled"}


def tool_name(update: dict[str, Any]) -> str:
    """The tool's name: what the agent calls it in its `_meta`, else the call's kind or title."""
    meta = update.get("_meta") or {}
    named = (meta.get("claudeCode") or {}).get("toolName") if isinstance(meta, dict) else None
    return str(named or update.get("kind") or update.get("title") or "tool")


def _result_content(update: dict[str, Any]) -> str | list[ContentBlock]:
    raw = update.get("rawOutput")
    if isinstance(raw, str) and raw:
        return raw
    texts = []
    for item in update.get("content") or []:
        inner = item.get("content") if isinstance(item, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
            texts.append(inner["text"])
    return "\n".join(texts) if texts else ("" if raw is None else str(raw))


@dataclass
class AcpStream:
    _round_text: list[str] = field(default_factory=list)
    """The text since the last tool results: the current round's."""
    _round_reported: bool = False
    """The current round's message went out (with its first tool call)."""
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    """toolCallId -> `{"name", "reported", "done"}`."""
    rounds: int = 0
    context_tokens: int = 0
    cost_usd: float | None = None

    def name_of(self, tool_call: dict[str, Any]) -> str:
        """The name of a call the agent asks permission for (its permission request names
        the call, not always the tool: the call's own notifications did)."""
        known = self._calls.get(str(tool_call.get("toolCallId")))
        return str(known["name"]) if known is not None else tool_name(tool_call)

    def feed(self, update: dict[str, Any]) -> list[ExecutorEvent]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content") or {}
            text = content.get("text") if isinstance(content, dict) else None
            if not text:
                return []
            if self._round_reported:  # text after tool results: a new round
                self._round_text, self._round_reported = [], False
            self._round_text.append(str(text))
            return [TextDelta(str(text))]
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        if kind == "plan":
            return [PlanUpdated([dict(e) for e in update.get("entries") or [] if isinstance(e, dict)])]
        if kind == "usage_update":
            self.context_tokens = int(update.get("used") or 0)
            cost = update.get("cost")
            if isinstance(cost, dict) and isinstance(cost.get("amount"), int | float) and cost.get("currency") == "USD":
                self.cost_usd = float(cost["amount"])
            return []
        return []

    def _tool_call(self, update: dict[str, Any]) -> list[ExecutorEvent]:
        call_id = str(update.get("toolCallId"))
        call = self._calls.setdefault(call_id, {"name": tool_name(update), "reported": False, "done": False})
        raw_input = update.get("rawInput")
        if call["reported"] or not raw_input and update.get("status") in (None, "pending"):
            return []  # its input comes with the next notification of the call
        return self._report_call(call_id, call, raw_input if isinstance(raw_input, dict) else {})

    def _report_call(self, call_id: str, call: dict[str, Any], raw_input: dict[str, Any]) -> list[ExecutorEvent]:
        call["reported"] = True
        out: list[ExecutorEvent] = []
        name = call["name"]
        if not self._round_reported:
            self._round_reported = True
            self.rounds += 1
            blocks: list[ContentBlock] = [{"type": "text", "text": "".join(self._round_text)}] \
                if "".join(self._round_text) else []
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": raw_input})
            out.append(AssistantMessage(message={"role": "assistant", "content": blocks}, stop_reason="tool_use"))
        out.append(ToolCall(tool_use_id=call_id, name=name, input=raw_input, loopwire_tool=loopwire_tool(name)))
        return out

    def _tool_update(self, update: dict[str, Any]) -> list[ExecutorEvent]:
        call_id = str(update.get("toolCallId"))
        call = self._calls.setdefault(call_id, {"name": tool_name(update), "reported": False, "done": False})
        out: list[ExecutorEvent] = []
        if not call["reported"] and isinstance(update.get("rawInput"), dict):
            out += self._report_call(call_id, call, update["rawInput"])
        status = update.get("status")
        if status in ("completed", "failed") and not call["done"]:
            if not call["reported"]:
                out += self._report_call(call_id, call, {})
            call["done"] = True
            out.append(ToolResult(tool_use_id=call_id, name=call["name"], content=_result_content(update),
                                  is_error=status == "failed", loopwire_tool=loopwire_tool(call["name"])))
        return out

    def finished(self, stop_reason: str, usage: dict[str, Any] | None, agent_session: str | None) -> Finished:
        """The end of the turn (`session/prompt`'s answer)."""
        text = "" if self._round_reported else "".join(self._round_text)
        usage = usage or {}
        reported = Usage(input_tokens=int(usage.get("inputTokens") or 0),
                         output_tokens=int(usage.get("outputTokens") or 0),
                         cache_read_input_tokens=int(usage.get("cachedReadTokens") or 0),
                         cache_creation_input_tokens=int(usage.get("cachedWriteTokens") or 0))
        stop = STOP_REASONS.get(stop_reason, "end_turn")
        return Finished(text=text, usage=reported, cost_usd=self.cost_usd, turns=self.rounds + 1,
                        stop_reason=stop, agent_session=agent_session, context_tokens=self.context_tokens,
                        is_error=stop == "refusal" and not text, error="the agent refused" if stop == "refusal" else None)
