"""An MCP server's tool as the catalog and the executor see it, without the MCP SDK.

The SDK (and what it pulls in: starlette, httpx2, ...) is imported only by mcp_client.py,
which the tools service loads when LOOPWIRE_MCP_SERVERS names a server: a deployment
without MCP servers does not pay for it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from loopwire.shared.contract.argument_schema import ArgumentValidator

from .invoke import Outcome, ProviderUnavailable
from .retry import RetryPolicy


class McpUnavailable(ProviderUnavailable):
    """The server is not connected (starting, restarting, or gone)."""


class McpCaller(Protocol):
    """The connection a tool is called through (mcp_client.McpConnection)."""

    name: str

    @property
    def connected(self) -> bool: ...

    async def call(self, remote_name: str, arguments: dict[str, Any], *, session_id: str,
                   tool_use_id: str, context: dict[str, str] | None = None) -> Outcome: ...


@dataclass(eq=False)
class McpTool:
    """One tool of one MCP server, under its loopwire name."""

    name: str
    remote_name: str
    description: str
    input_schema: dict[str, Any]
    connection: McpCaller = field(repr=False)
    validator: ArgumentValidator | None = field(default=None, repr=False)
    exclusive: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None

    async def call(self, arguments: dict[str, Any], *, session_id: str, tool_use_id: str,
                   context: dict[str, str] | None = None) -> Outcome:
        return await self.connection.call(self.remote_name, arguments, session_id=session_id,
                                          tool_use_id=tool_use_id, context=context)
