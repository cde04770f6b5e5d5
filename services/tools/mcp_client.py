"""MCP servers as tool providers: one supervised connection per server of LOOPWIRE_MCP_SERVERS.

Each :class:`McpConnection` runs one task that connects with the official SDK
(`ClientSession` over `stdio_client` or `streamable_http_client`), initializes, lists the
server's tools, and then stays in the session until it ends::

    connect ─▶ initialize ─▶ tools/list ─▶ connected ─┬─ notifications/tools/list_changed ─▶ tools/list again
                  ▲                                  ├─ a ping every PING_INTERVAL_S
                  └── back-off 0.5 s … 30 s ◀─────────┴─ the stream ended, a ping failed ─▶ disconnected

A stdio server is a child process of this tools replica: when it dies the stream ends at
once and the next attempt starts a new process. Several replicas each keep their own
connection (and process), as they each keep their own NATS subscriptions.

Tool `t` of server `s` is the :class:`McpTool` `s__t`, resolved by the catalog next to
Python tools and NATS providers, so the executor gives it the same validation (against the
server's input schema), timeouts, retries, spans, metrics and events. A tool keeps its
place in the catalog while its server reconnects; its `seen_at` stops moving, so readers
drop it after `catalog_max_age` if the server stays away.

A call made while the server is not connected waits up to `connect_wait_s` for it (a
restart takes a moment), then fails as unavailable. A call in flight when the connection
breaks fails with an error result: it may have run, so it is not sent again unless the
operator configured `retries`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import anyio
import httpx2
from jsonschema.exceptions import SchemaError
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from .invoke import Outcome
from .mcp_config import McpServerConfig, loopwire_name
from .mcp_content import outcome_of
from .mcp_tool import McpTool, McpUnavailable
from .registry import RESERVED_NAMES, TOOL_NAME_RE, compile_validator
from .retry import RetryPolicy

log = logging.getLogger("loopwire.tools.mcp")

CONNECT_TIMEOUT_S = 30.0
"""Start (a stdio process, `npx` fetching a package), initialize and the first tools/list."""
PING_INTERVAL_S = 5.0
"""How often a connected server is pinged: a hung HTTP server is noticed within ~2 pings."""
PING_TIMEOUT_S = 5.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 30.0
"""A connection that lasted this long resets the back-off: the next failure retries fast."""
META_SESSION = "loopwire/session_id"
META_TOOL_USE = "loopwire/tool_use_id"
META_CONTEXT = {"Loopwire-User-Id": "loopwire/user_id", "Loopwire-Workspace-Id": "loopwire/workspace_id"}
"""The run's context fields (invoke.context_headers) as `_meta` keys."""
"""`_meta` of every call: the server can key its own idempotency on the tool-use id, as a
NATS provider does on its `Loopwire-Tool-Use-Id` header."""


class _WatchedStream:
    """The transport's read stream, telling when it ends (the server's process died, the
    HTTP session closed) so the supervisor reconnects without waiting for a ping."""

    def __init__(self, inner: Any, ended: Callable[[], None]) -> None:
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:  # last_context and anything else the SDK reads
        return getattr(self._inner, name)

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError, anyio.EndOfStream):
            self._ended()
            raise

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.ClosedResourceError, anyio.EndOfStream):
            self._ended()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        self._ended()
        return await self._inner.__aexit__(*exc)


class McpConnection:
    """One MCP server: its connection, kept alive, and its tools."""

    def __init__(self, name: str, config: McpServerConfig, *, on_change: Callable[[], None] | None = None,
                 connect_wait_s: float = 10.0) -> None:
        self.name = name
        self.config = config
        self.on_change = on_change
        """Told when the tool list changed (connected, relisted): the service republishes the catalog."""
        self.connect_wait_s = connect_wait_s
        self.tools: dict[str, McpTool] = {}
        self.last_seen = 0.0
        """time.time() of the last sign of life (connect, listing, ping)."""
        self.last_error: str | None = None
        self.connects = 0
        self._session: ClientSession | None = None
        self._connected = asyncio.Event()
        self._wake = asyncio.Event()
        self._ended = False
        self._relist = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._warned: set[str] = set()

    @property
    def connected(self) -> bool:
        return self._session is not None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def wait_connected(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._connected.wait()
        return self.connected

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is None:
            return
        # The supervisor leaves its session itself (the SDK closes stdin, then terminates
        # the process tree); a cancel is the fallback for one that does not.
        done, _ = await asyncio.wait({self._task}, timeout=8)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5)
        self._task = None

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping:
            began = time.monotonic()
            try:
                await self._serve_once()
            except Exception as exc:
                self.last_error = _describe(exc)
            self._disconnected()
            if self._stopping:
                return
            if time.monotonic() - began >= STABLE_AFTER_S:
                failures = 0
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** failures)
            failures += 1
            log.warning("MCP server %s (%s) is not connected: %s; trying again in %.1fs", self.name,
                        self.config.transport, self.last_error or "the connection ended", delay)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()  # only stop() sets it now

    async def _serve_once(self) -> None:
        self._ended, self._relist = False, False
        self.last_error = None
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(ClientSession(
                _WatchedStream(read, self._stream_ended), write, message_handler=self._on_message,
                client_info=types.Implementation(name="loopwire", version="1")))
            # The deadline covers the exchanges only: a cancel scope entered around the
            # contexts above would not nest with their task groups.
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                await session.initialize()
                await self._list_tools(session)
            self._session = session
            self._connected.set()
            self.connects += 1
            log.info("MCP server %s connected (%s): %s", self.name, self.config.describe(),
                     ", ".join(self.tools) or "no tools")
            self._changed()
            while not (self._stopping or self._ended):
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PING_INTERVAL_S):
                        await self._wake.wait()
                if self._stopping or self._ended:
                    break
                if self._relist:
                    self._relist = False
                    with anyio.fail_after(CONNECT_TIMEOUT_S):
                        await self._list_tools(session)
                    log.info("MCP server %s changed its tools: %s", self.name, ", ".join(self.tools) or "none")
                    self._changed()
                else:
                    with anyio.fail_after(PING_TIMEOUT_S):
                        await session.send_ping()
                    self.last_seen = time.time()
            if self._ended and not self._stopping:
                self.last_error = "the connection ended"

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        cfg = self.config
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.env or None, cwd=cfg.cwd)
            async with stdio_client(params) as streams:
                yield streams
            return
        assert cfg.url is not None
        timeout = httpx2.Timeout(30.0, read=300.0)  # a response stream may stay open long
        async with httpx2.AsyncClient(headers=cfg.headers, timeout=timeout) as http:
            async with streamable_http_client(cfg.url, http_client=http) as streams:
                yield streams

    def _stream_ended(self) -> None:
        self._ended = True
        self._session = None
        self._connected.clear()
        self._wake.set()

    def _disconnected(self) -> None:
        self._session = None
        self._connected.clear()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport error %s", self.name, _describe(message))

    def _changed(self) -> None:
        self.last_seen = time.time()
        if self.on_change is not None:
            self.on_change()

    # -- tools ------------------------------------------------------------------------------
    async def _list_tools(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever cannot hold the connection
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        tools: dict[str, McpTool] = {}
        for remote in listed:
            tool = self._tool(remote)
            if tool is not None:
                tools[tool.name] = tool
        self.tools = tools

    def _tool(self, remote: types.Tool) -> McpTool | None:
        name = loopwire_name(self.name, remote.name)
        if not TOOL_NAME_RE.match(name) or name in RESERVED_NAMES:
            self._warn_once(f"MCP server {self.name}: tool {remote.name!r} gives the name {name!r}, which "
                            f"is not a valid tool name (1-64 of [A-Za-z0-9_-]); tool left out")
            return None
        schema = dict(remote.input_schema or {"type": "object"})
        try:
            validator = compile_validator(schema)
        except SchemaError as exc:
            self._warn_once(f"MCP server {self.name}: tool {remote.name!r} has an invalid input schema "
                            f"({str(exc).splitlines()[0]}); tool left out")
            return None
        cfg = self.config
        return McpTool(name=name, remote_name=remote.name, description=remote.description or "",
                       input_schema=schema, connection=self, validator=validator,
                       retry=RetryPolicy(cfg.retries, cfg.retry_backoff_s), timeout_s=cfg.timeout_s)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    # -- calls ------------------------------------------------------------------------------
    async def call(self, remote_name: str, arguments: dict[str, Any], *, session_id: str,
                   tool_use_id: str, context: dict[str, str] | None = None) -> Outcome:
        session = self._session
        if session is None:
            if not await self.wait_connected(self.connect_wait_s):
                raise McpUnavailable(f"MCP server {self.name} is not connected"
                                     + (f" ({self.last_error})" if self.last_error else ""))
            session = self._session
            assert session is not None
        meta = cast(types.RequestParamsMeta, {META_SESSION: session_id, META_TOOL_USE: tool_use_id,
                                              **{META_CONTEXT[k]: v for k, v in (context or {}).items() if k in META_CONTEXT}})
        try:
            result = await session.call_tool(remote_name, arguments, meta=meta)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                return Outcome(f"the connection to MCP server {self.name} broke during the call (the call may "
                               "or may not have run); it is being reconnected", is_error=True)
            return Outcome(f"MCP server {self.name} refused the call: {exc.error.message}", is_error=True)
        return outcome_of(result)


def _describe(exc: BaseException) -> str:
    """One line for a log: exception groups (anyio task groups) unwrapped to their first cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpServers:
    """Every configured MCP server's connection; tools by their loopwire names."""

    def __init__(self, connections: list[McpConnection]) -> None:
        self.connections = connections

    @classmethod
    def from_config(cls, configs: dict[str, McpServerConfig], on_change: Callable[[], None] | None = None,
                    connect_wait_s: float = 10.0) -> McpServers:
        return cls([McpConnection(name, cfg, on_change=on_change, connect_wait_s=connect_wait_s)
                    for name, cfg in configs.items()])

    def start(self) -> None:
        for conn in self.connections:
            conn.start()

    async def wait_connected(self, timeout: float) -> None:
        """Until every server connected once, or `timeout` (the service starts anyway)."""
        if self.connections:
            await asyncio.gather(*(c.wait_connected(timeout) for c in self.connections))

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.connections))

    def tools_by_name(self, now: float) -> dict[str, tuple[McpTool, float]]:
        """Every tool with when it was last confirmed: now while its server is connected,
        else when the server last showed life."""
        out: dict[str, tuple[McpTool, float]] = {}
        for conn in self.connections:
            seen = now if conn.connected else conn.last_seen
            for name, tool in conn.tools.items():
                out[name] = (tool, seen)
        return out

    def get(self, name: str) -> McpTool | None:
        for conn in self.connections:
            tool = conn.tools.get(name)
            if tool is not None:
                return tool
        return None
