"""`loopwire mcp`: the tools the tools service knows, served to any MCP client.

    loopwire mcp                  # stdio (what Claude Code, Claude Desktop and editors start)
    loopwire mcp --http 8931      # streamable HTTP at http://127.0.0.1:8931/mcp

It is a thin MCP server (the official SDK's low-level `Server`) in front of the tools
service, which it reaches over NATS only, as any client of loopwire does:

- `tools/list` asks `<prefix>.api.tools.list`: in-process Python tools, NATS providers and
  MCP servers' tools, the same list a run's model is offered;
- `tools/call` sends `<prefix>.rpc.tools.call` (services/tools/direct_call.py): the tools
  service validates the input against the tool's schema, applies the operator's
  LOOPWIRE_TOOL_POLICY, runs the call with its timeout and retries, records it and emits
  `tool.call` / `tool.result` on the caller's session.

The session is `mcp-<client id>` (the client's name and its connection), unless the call
names one in `_meta` as `loopwire/session_id`. A call that did not run (unknown tool,
input refused by the schema, a policy that denies it) is an MCP error (JSON-RPC
`-32602`, invalid params, or `-32600` for the policy); a call that ran and failed is a
result with `isError: true`, as MCP has it.

On stdio, stdout is the protocol: everything else (logs) goes to stderr.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import orjson
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from loopwire.settings import Settings
from loopwire.shared.contract.subjects import Subjects

log = logging.getLogger("loopwire.mcp")

META_SESSION = "loopwire/session_id"
LIST_TIMEOUT_S = 10.0
CALL_MARGIN_S = 15.0
"""A call waits for the tools service's answer this much longer than the tool's own timeout
(the service answers a timed-out call with an error result itself)."""
REFUSED_AS_INVALID_PARAMS = {"unknown_tool", "invalid_input", "bad_request"}
REFUSED_AS_INVALID_REQUEST = {"denied", "approval_required"}


def client_session(client_name: str | None, connection: str) -> str:
    """`mcp-<client>-<connection>`, in session-id characters and at most 128 of them."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", client_name or "client").strip("-")[:48] or "client"
    conn = re.sub(r"[^A-Za-z0-9_-]+", "", connection)[:32]
    return f"mcp-{name}-{conn}"


class ToolsGateway:
    """The tools service, as `loopwire mcp` reaches it: two NATS requests."""

    def __init__(self, nc: NatsClient, settings: Settings) -> None:
        self.nc = nc
        self.subjects = Subjects(settings.subject_prefix)
        self.call_timeout_s = settings.tool_timeout_s + CALL_MARGIN_S

    async def list_tools(self) -> list[dict[str, Any]]:
        body = await self._request(self.subjects.tools_list, {}, LIST_TIMEOUT_S)
        if "error" in body:
            raise MCPError(types.INTERNAL_ERROR, f"tools.list failed: {body['error'].get('message')}")
        return list(body.get("tools", []))

    async def call(self, name: str, arguments: dict[str, Any], session_id: str) -> dict[str, Any]:
        return await self._request(self.subjects.tools_call,
                                   {"name": name, "input": arguments, "session_id": session_id},
                                   self.call_timeout_s)

    async def _request(self, subject: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            reply = await self.nc.request(subject, orjson.dumps(body), timeout=timeout)
        except NoRespondersError:
            raise MCPError(types.INTERNAL_ERROR, "no loopwire tools service answers (is it running?)") from None
        except NatsTimeoutError:
            raise MCPError(types.INTERNAL_ERROR, f"the loopwire tools service did not answer in {timeout:g}s") from None
        answer = orjson.loads(reply.data)
        if not isinstance(answer, dict):
            raise MCPError(types.INTERNAL_ERROR, "the loopwire tools service sent a malformed answer")
        return answer


def build_server(gateway: ToolsGateway, connection_id: str | None = None) -> Server[Any]:
    """The MCP server; `connection_id` names this process's one client (stdio), else each
    HTTP client is told apart by its `Mcp-Session-Id`."""
    process_id = connection_id or uuid.uuid4().hex[:12]

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        tools = await gateway.list_tools()
        return types.ListToolsResult(tools=[
            types.Tool(name=t["name"], description=t.get("description") or None,
                       input_schema=t.get("input_schema") or {"type": "object"})
            for t in tools])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        session_id = _session_of(ctx, params, process_id)
        reply = await gateway.call(params.name, dict(params.arguments or {}), session_id)
        error = reply.get("error")
        if isinstance(error, dict):
            code, message = str(error.get("code")), str(error.get("message"))
            if code in REFUSED_AS_INVALID_PARAMS:
                raise MCPError(types.INVALID_PARAMS, message, {"loopwire_code": code})
            if code in REFUSED_AS_INVALID_REQUEST:
                raise MCPError(types.INVALID_REQUEST, message, {"loopwire_code": code})
            raise MCPError(types.INTERNAL_ERROR, message, {"loopwire_code": code})
        return types.CallToolResult(content=mcp_content(reply.get("content", "")),
                                    is_error=bool(reply.get("is_error")))

    return Server("loopwire", version="1", instructions="Tools of a loopwire deployment, run by its tools service.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _session_of(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, process_id: str) -> str:
    named = (params.meta or {}).get(META_SESSION)  # type: ignore[union-attr]
    if isinstance(named, str) and named:
        return named  # checked by the tools service like any session id
    client = ctx.session.client_params
    name = client.client_info.name if client is not None else None
    headers = getattr(ctx.request, "headers", None)
    http_session = headers.get("mcp-session-id") if headers is not None else None
    return client_session(name, http_session or process_id)


def mcp_content(content: Any) -> list[types.ContentBlock]:
    """loopwire tool_result content as MCP content: text and base64 images as they are,
    anything else (a large result's reference block) as its text or its JSON."""
    if isinstance(content, str):
        return [types.TextContent(type="text", text=content)]
    out: list[types.ContentBlock] = []
    for block in content if isinstance(content, list) else [content]:
        if not isinstance(block, dict):
            out.append(types.TextContent(type="text", text=orjson.dumps(block).decode()))
            continue
        source = block.get("source")
        if block.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
            out.append(types.ImageContent(type="image", data=str(source.get("data", "")),
                                          mime_type=str(source.get("media_type", "image/png"))))
        elif isinstance(block.get("text"), str):
            out.append(types.TextContent(type="text", text=block["text"]))
        else:
            out.append(types.TextContent(type="text", text=orjson.dumps(block).decode()))
    return out


async def serve_stdio(settings: Settings, nc: NatsClient) -> None:
    """Until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    server = build_server(ToolsGateway(nc, settings))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(settings: Settings, nc: NatsClient, host: str, *, port: int) -> None:
    """Until SIGINT or SIGTERM (uvicorn's own handling)."""
    import uvicorn

    server = build_server(ToolsGateway(nc, settings))
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
