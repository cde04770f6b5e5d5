"""The tools service: in-process Python tools and NATS tool providers, executed for the router.

Write an in-process tool with ``from loopwire.tools import tool``; the service itself is
:class:`loopwire.tools.service.ToolsService`; the published catalog is read with
:func:`loopwire.tools.catalog.read_catalog`.
"""

from .registry import ToolError, ToolRegistry, default_registry, tool

__all__ = ["ToolError", "ToolRegistry", "default_registry", "tool"]
