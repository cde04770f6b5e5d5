"""One tool call from outside any run: `<prefix>.rpc.tools.call` (core request/reply, internal).

`loopwire mcp` serves the tools service's tools to MCP clients and sends each of their
calls here, so a call from Claude Code goes through the same catalog, validation, operator
policy, executor (timeouts, retries, spans, metrics, the recorded result) and events as a
model's call in a run. The subject is under `<prefix>.rpc.`, not `<prefix>.api.`: it runs a
tool with no run around it, so only loopwire's own processes should be allowed to publish
it (docs/security.md's NATS permissions leave `rpc.>` out of a client's).

Request::

    {"name": "files__read_file", "input": {...}, "session_id": "mcp-claude-code-1a2b",
     "tool_use_id": "optional; a new id when absent",
     "run_id": "optional", "turn": 0, "approved": false,
     "user_id": "optional", "workspace_id": "optional"}

`run_id` and `turn` name the run an external agent's call belongs to (the llm service's
MCP bridge for the executor profiles, services/llm/executors/mcp_bridge.py): its events
carry them. `approved: true` says the run's checkpoint approved this call (the tool's
permission is `approve` and a `decision` said so); only loopwire's own processes publish
on `<prefix>.rpc.>`. `user_id` and `workspace_id` are the run's context fields (StartRun
`user_id`, `metadata.workspace_id`): the provider gets them as headers.

Reply: ``{"tool_use_id", "content", "is_error"}`` for a call that ran (an `is_error`
result is still a result), or ``{"error": {"code", "message"}}`` for one that did not:
`bad_request`, `unknown_tool`, `invalid_input`, `denied` (operator policy `deny`),
`approval_required` (operator policy `approve`, and no run's checkpoint approved it),
`internal`. The session gets `tool.call` and `tool.result` events (with the request's
run_id and turn; else run_id null, turn 0) for a call that ran.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.contract.event_fields import ToolCallFields, tool_result_event
from loopwire.shared.contract.protocol import error_reply, header_value
from loopwire.shared.contract.subjects import valid_session_id
from loopwire.shared.runtime.bus import Bus

from .catalog import Catalog
from .executor import Executor, validation_problem
from .settings import ToolsSettings

log = logging.getLogger("loopwire.tools.direct")

DEFAULT_SESSION = "mcp"


def operator_permission(settings: ToolsSettings, name: str) -> str:
    """The operator's policy for a tool (`LOOPWIRE_TOOL_POLICY`), `auto` when it names none.
    A caller of `loopwire mcp` has no permissions of its own to add: the policy is all."""
    return settings.tool_policy.get(name, "auto")


class DirectCalls:
    def __init__(self, catalog: Catalog, executor: Executor, bus: Bus, *, settings: ToolsSettings,
                 refresh: Callable[[], Awaitable[Any]] | None = None) -> None:
        self.catalog = catalog
        self.executor = executor
        self.bus = bus
        self.settings = settings
        self.refresh = refresh

    async def handle(self, data: bytes) -> bytes:
        try:
            return orjson.dumps(await self._handle(data))
        except Exception as exc:  # Redis or NATS failed under us: say so, never hang the caller
            log.exception("direct tool call failed")
            return orjson.dumps(error_reply("internal", f"the tool call failed: {type(exc).__name__}: {exc}"))

    async def _handle(self, data: bytes) -> dict[str, Any]:
        try:
            req = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return error_reply("bad_request", f"the request is not JSON: {exc}")
        if not isinstance(req, dict) or not isinstance(req.get("name"), str):
            return error_reply("bad_request", "expected {\"name\": str, \"input\": object, \"session_id\": str}")
        name = req["name"]
        arguments = req.get("input") if req.get("input") is not None else {}
        session_id = req.get("session_id") or DEFAULT_SESSION
        tool_use_id = req.get("tool_use_id") or f"mcp_{uuid.uuid4().hex}"
        run_id = req.get("run_id") if isinstance(req.get("run_id"), str) else None
        raw_turn = req.get("turn")
        turn = raw_turn if isinstance(raw_turn, int) else 0
        if not isinstance(arguments, dict):
            return error_reply("invalid_input", f"the input of tool {name} must be a JSON object")
        if not isinstance(session_id, str) or not valid_session_id(session_id):
            return error_reply("bad_request", "session_id must be 1-128 characters of [A-Za-z0-9_-]")
        if not isinstance(tool_use_id, str) or not valid_session_id(tool_use_id):
            return error_reply("bad_request", "tool_use_id must be 1-128 characters of [A-Za-z0-9_-]")

        tool = self.catalog.resolve(name)
        if tool is None and self.refresh is not None:
            await self.refresh()  # a provider that started a moment ago
            tool = self.catalog.resolve(name)
        if tool is None:
            return error_reply("unknown_tool", f"unknown tool: {name}")
        problem = validation_problem(tool, arguments)
        if problem is not None:
            return error_reply("invalid_input", f"invalid input for tool {name}: {problem}")
        permission = operator_permission(self.settings, name)
        if permission == "deny":
            return error_reply("denied", f"tool {name} is denied by the operator's policy")
        if permission == "approve" and not (run_id and req.get("approved") is True):
            return error_reply("approval_required", f"tool {name} needs an approval, which only a run can ask "
                                                    "for; call it from a run")

        call = ToolCall(tool_use_id=tool_use_id, name=name, input=arguments)
        await self.bus.emit(session_id, run_id, "tool.call", key=message_ids.tool_call_key(tool_use_id), fields=ToolCallFields(turn=turn,
                            tool_use_id=tool_use_id, name=name, input=arguments))
        env = ExecuteTools(session_id=session_id, run_id=run_id or "", step_id=message_ids.direct_step_id(tool_use_id), calls=[call],
                           user_id=header_value(req.get("user_id")), workspace_id=header_value(req.get("workspace_id")))
        (item,) = await self.executor.execute(env)
        await self.bus.emit(session_id, run_id, "tool.result", key=message_ids.tool_result_key(tool_use_id),
                            fields=tool_result_event(turn=turn, tool_use_id=tool_use_id, name=name, is_error=item.is_error,
                                                content=item.content))
        return {"tool_use_id": tool_use_id, "content": item.content, "is_error": item.is_error}
