"""The tools service: in-process Python tools, NATS tool providers and MCP servers' tools
(mcp_client.py, docs/tools.md), executed for the router and for `loopwire mcp`.

Write an in-process tool with ``from loopwire.tools import tool``; the service itself is
:class:`loopwire.tools.service.ToolsService`; the published catalog is read with
:func:`loopwire.shared.stores.tool_catalog.read_catalog`.
"""

from .registry import ToolError, ToolRegistry, default_registry, tool

__all__ = ["ToolError", "ToolRegistry", "default_registry", "tool"]
