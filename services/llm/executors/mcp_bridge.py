"""The run's loopwire tools, served to its agent over MCP by the llm process itself.

One MCP server (the official SDK's low-level `Server`, streamable HTTP, stateless) per llm
process, on 127.0.0.1 and a free port, started on first use. Each executor step that has
tools registers them under a random bearer token (`open`), given to its agent in the MCP
configuration (`Authorization` header); the token names the step, so one server serves
every agent of the process, each seeing only its own run's tools:

- `tools/list`: the run's tools (Generate.tools: the catalog's specs of the run's `tools`);
- `tools/call`: checked against the run's permissions (`deny`: refused; `approve`: only a
  call the run's checkpoint approved, `PermissionRequest` in runner.py), then sent to the
  tools service on `<prefix>.rpc.tools.call` (services/tools/direct_call.py) with the
  session, run and turn, and the agent's own tool_use id (Claude Code sends it in the
  request's `_meta` as `claudecode/toolUseId`) as the call's `Loopwire-Tool-Use-Id`. The
  tools service validates the input, runs the call with its timeouts and retries, records
  it and emits `tool.call` / `tool.result` on the session, as for any call of a run.

Without a process of its own, nothing reaches NATS but the llm service, and the agent gets
no NATS credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.runtime.service_context import ServiceContext

from ..settings import LlmSettings
from .base import McpEndpoint

log = logging.getLogger("loopwire.llm.executors.mcp")

TOOL_USE_META = ("claudecode/toolUseId", "loopwire/tool_use_id")
CALL_MARGIN_S = 15.0
"""A call waits this much longer than the tool's own timeout (the tools service answers a
timed-out call itself)."""


@dataclass
class StepTools:
    """What one step's agent may call, and for which session."""

    session_id: str
    run_id: str
    step_id: str
    tools: list[ToolSpec]
    permissions: dict[str, str]
    turn: Callable[[], int] = lambda: 0
    approved: set[str] = field(default_factory=set)
    """tool_use ids of calls the run's checkpoint approved (permission `approve`)."""
    user_id: str | None = None
    workspace_id: str | None = None
    """The run's context fields, passed on with each call (the providers' headers)."""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))


class McpBridge:
    def __init__(self, ctx: ServiceContext[LlmSettings], host: str = "127.0.0.1") -> None:
        self.ctx = ctx
        self.host = host
        self.port = 0
        self._steps: dict[str, StepTools] = {}
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def open(self, step: StepTools) -> McpEndpoint:
        await self._ensure_started()
        self._steps[step.token] = step
        return McpEndpoint(url=f"http://{self.host}:{self.port}/mcp",
                           headers={"Authorization": f"Bearer {step.token}"})

    def close(self, step: StepTools) -> None:
        self._steps.pop(step.token, None)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 5)
            self._task = None
        self._server = None

    async def _ensure_started(self) -> None:
        async with self._lock:
            if self._task is not None and not self._task.done():
                return
            import uvicorn

            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
            self.port = int(sock.getsockname()[1])
            app = self._mcp_server().streamable_http_app(stateless_http=True, json_response=True, host=self.host)
            config = uvicorn.Config(app, log_level="warning", lifespan="on")
            self._server = uvicorn.Server(config)
            self._server.install_signal_handlers = lambda: None  # the service owns its signals
            self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="executor-mcp-bridge")
            while not self._server.started and not self._task.done():  # noqa: ASYNC110 - uvicorn has no event
                await asyncio.sleep(0.01)
            log.info("executor MCP bridge on %s:%d", self.host, self.port)

    # -- the MCP server -------------------------------------------------------------------------
    def _mcp_server(self) -> Server[Any]:
        async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                             ) -> types.ListToolsResult:
            step = self._step_of(ctx)
            return types.ListToolsResult(tools=[
                types.Tool(name=t.name, description=t.description or None, input_schema=t.input_schema or
                           {"type": "object"}) for t in step.tools
                if step.permissions.get(t.name, "auto") != "deny"])

        async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                            ) -> types.CallToolResult:
            step = self._step_of(ctx)
            return await self._call(step, params)

        return Server("loopwire", version="1", instructions="The tools of this loopwire run.",
                      on_list_tools=list_tools, on_call_tool=call_tool)

    def _step_of(self, ctx: ServerRequestContext[Any]) -> StepTools:
        headers = getattr(ctx.request, "headers", None)
        auth = headers.get("authorization", "") if headers is not None else ""
        step = self._steps.get(auth.removeprefix("Bearer ").strip())
        if step is None:
            raise MCPError(types.INVALID_REQUEST, "unknown or expired loopwire tools token")
        return step

    async def _call(self, step: StepTools, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if not any(t.name == name for t in step.tools):
            raise MCPError(types.INVALID_PARAMS, f"tool {name} is not one of this run's tools")
        meta: dict[str, Any] = dict(params.meta or {})
        tool_use_id = next((str(meta[k]) for k in TOOL_USE_META if isinstance(meta.get(k), str)),
                           None) or f"mcp_{uuid.uuid4().hex}"
        permission = step.permissions.get(name, "auto")
        if permission == "deny":
            raise MCPError(types.INVALID_REQUEST, f"tool {name} is denied by the run's tool permissions")
        if permission == "approve" and tool_use_id not in step.approved:
            raise MCPError(types.INVALID_REQUEST, f"tool {name} needs an approval the run did not give")
        body = {"name": name, "input": dict(params.arguments or {}), "session_id": step.session_id,
                "tool_use_id": tool_use_id, "run_id": step.run_id, "turn": step.turn(),
                "approved": permission == "approve", "user_id": step.user_id, "workspace_id": step.workspace_id}
        timeout = self.ctx.settings.tool_timeout_s + CALL_MARGIN_S
        try:
            reply = await self.ctx.bus.nc.request(self.ctx.subjects.tools_call, orjson.dumps(body), timeout=timeout)
        except NoRespondersError:
            raise MCPError(types.INTERNAL_ERROR, "no loopwire tools service answers") from None
        except NatsTimeoutError:
            raise MCPError(types.INTERNAL_ERROR, f"the loopwire tools service did not answer in {timeout:g}s") from None
        answer = orjson.loads(reply.data)
        error = answer.get("error") if isinstance(answer, dict) else {"message": "a malformed answer"}
        if isinstance(error, dict):
            raise MCPError(types.INVALID_PARAMS if error.get("code") in ("invalid_input", "unknown_tool")
                           else types.INTERNAL_ERROR, str(error.get("message")))
        return types.CallToolResult(content=_as_mcp(answer.get("content", "")), is_error=bool(answer.get("is_error")))


def _as_mcp(content: Any) -> list[types.ContentBlock]:
    """A loopwire tool result as MCP content: text and base64 images as they are, any
    other block as its JSON."""
    if isinstance(content, str):
        return [types.TextContent(type="text", text=content)]
    out: list[types.ContentBlock] = []
    for block in content if isinstance(content, list) else [content]:
        source = block.get("source") if isinstance(block, dict) else None
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append(types.TextContent(type="text", text=block["text"]))
        elif isinstance(block, dict) and block.get("type") == "image" and isinstance(source, dict):
            out.append(types.ImageContent(type="image", data=str(source.get("data", "")),
                                          mime_type=str(source.get("media_type", "image/png"))))
        else:
            out.append(types.TextContent(type="text", text=orjson.dumps(block).decode()))
    return out
