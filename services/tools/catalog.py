"""The tool catalog: in-process tools and discovered providers, as one view.

The tools service keeps it in memory (the executor resolves names through it) and
publishes it to Redis after every discovery round (keys.TOOL_CATALOG, whose readers are
in shared/stores/tool_catalog.py), so other services read it without a hop. Each tools
process publishes as its own owner and lists the tools it serves: a process that is gone
(stopped, killed, started again with other providers) leaves nothing on offer.

`seen_at` is when the entry was last confirmed (each round for in-process tools; the
provider's last answer for NATS tools; each round while its server is connected for MCP
tools, mcp_client.py). Readers ignore entries older than
`catalog_max_age(settings)`, and entries no live tools process lists; writers delete
those.

Who serves a name is never decided by sort order (a provider whose service name sorts
first must not take over a tool): an in-process tool (the operator loaded it) wins over
an MCP server's tool (the operator configured it: LOOPWIRE_MCP_SERVERS), which wins over
providers of the same name; several instances of ONE service (replicas) serve a tool
together; providers with different service names offering one tool name are a
conflict, which the operator settles with `LOOPWIRE_TOOL_PROVIDERS` (`{tool: service
name}`: only that service's instances serve it, and while it is absent nobody does).
An unsettled conflict is refused: the tool is in no catalog, calls get "unknown tool",
it is logged, counted in `loopwire_tool_conflicts` and listed by `api.tools.list`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import redis.asyncio as aioredis

from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.observability import metrics
from loopwire.shared.stores.tool_catalog import CatalogEntry, OwnerAlive, publish_entries, withdraw

from .discovery import DiscoveredTool, ProviderTable
from .registry import PythonTool, ToolRegistry

if TYPE_CHECKING:
    # Only for types: the tools service's catalog need not load the MCP SDK to be imported.
    from .mcp_client import McpServers
    from .mcp_tool import McpTool

log = logging.getLogger("loopwire.tools.catalog")

ResolvedTool: TypeAlias = "PythonTool | McpTool | DiscoveredTool"


@dataclass(frozen=True)
class ToolConflict:
    """One tool name offered by more than one source."""

    name: str
    services: tuple[str, ...]
    """The providers' service names (`in-process` for a Python tool, `mcp:<server>` for an
    MCP server's), sorted."""
    resolution: Literal["refused", "pinned", "in_process", "mcp"]
    """`refused`: nobody serves it; `pinned`: LOOPWIRE_TOOL_PROVIDERS names the one that
    does; `in_process`: the operator's in-process tool does; `mcp`: the operator's MCP
    server does."""
    served_by: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "services": list(self.services), "resolution": self.resolution,
                "served_by": self.served_by}


Instances = list[tuple[DiscoveredTool, float]]


class Catalog:
    """The tools service's own view: registry + MCP servers + provider table, resolved by name."""

    def __init__(self, registry: ToolRegistry, providers: ProviderTable | None = None,
                 pins: Mapping[str, str] | None = None, *, mcp: McpServers | None = None,
                 owner: str | None = None, alive: OwnerAlive | None = None) -> None:
        self.registry = registry
        self.providers = providers
        self.mcp = mcp
        self.pins = dict(pins or {})
        """LOOPWIRE_TOOL_PROVIDERS: tool name -> the service name that serves it."""
        self.owner = owner or uuid.uuid4().hex[:12]
        """This tools process's id: whose entries it publishes."""
        self.alive = alive
        """Whether another tools process is running (None: only its listing's age says)."""
        self._conflicts_told: set[tuple[str, tuple[str, ...]]] = set()

    def _served(self) -> tuple[dict[str, Instances], dict[str, ToolConflict]]:
        """The provider instances that may serve each tool name, and the conflicts."""
        usable: dict[str, Instances] = {}
        conflicts: dict[str, ToolConflict] = {}
        by_name = self.providers.tools_by_name() if self.providers is not None else {}
        for name, instances in by_name.items():
            services = tuple(sorted({t.service_name for t, _ in instances}))
            pin = self.pins.get(name)
            if pin is not None:
                chosen = [(t, seen) for t, seen in instances if t.service_name == pin]
                if chosen:
                    usable[name] = chosen
                if len(services) > 1 or not chosen:
                    conflicts[name] = ToolConflict(name, services, "pinned", pin)
            elif len(services) > 1:
                conflicts[name] = ToolConflict(name, services, "refused", None)
            else:
                usable[name] = instances
        mcp_tools = self.mcp.tools_by_name(time.time()) if self.mcp is not None else {}
        for name, (tool, _) in mcp_tools.items():
            if name in by_name and self.registry.get(name) is None:
                source = f"mcp:{tool.connection.name}"
                services = tuple(sorted({s.service_name for s, _ in by_name[name]} | {source}))
                conflicts[name] = ToolConflict(name, services, "mcp", source)
        for t in self.registry.all():
            if t.name in by_name or t.name in mcp_tools:
                others = {s.service_name for s, _ in by_name.get(t.name, [])}
                if t.name in mcp_tools:
                    others.add(f"mcp:{mcp_tools[t.name][0].connection.name}")
                services = tuple(sorted(others | {"in-process"}))
                conflicts[t.name] = ToolConflict(t.name, services, "in_process", "in-process")
        for conflict in conflicts.values():
            self._tell_conflict(conflict)
        return usable, conflicts

    def resolve(self, name: str) -> ResolvedTool | None:
        found = self.registry.get(name)
        if found is not None:
            return found
        if self.mcp is not None:
            from_mcp = self.mcp.get(name)
            if from_mcp is not None:
                return from_mcp
        instances = self._served()[0].get(name)
        return instances[0][0] if instances else None

    def conflicts(self) -> list[ToolConflict]:
        return sorted(self._served()[1].values(), key=lambda c: c.name)

    def entries(self, now: float | None = None) -> dict[str, CatalogEntry]:
        now = time.time() if now is None else now
        out: dict[str, CatalogEntry] = {}
        usable, conflicts = self._served()
        metrics.TOOL_CONFLICTS.set(sum(1 for c in conflicts.values() if c.resolution == "refused"))
        for name, instances in usable.items():
            first = instances[0][0]
            out[name] = CatalogEntry(name, first.description, first.input_schema, "nats",
                                     first.exclusive, max(seen for _, seen in instances))
        if self.mcp is not None:
            for name, (tool, seen) in self.mcp.tools_by_name(now).items():
                out[name] = CatalogEntry(name, tool.description, tool.input_schema, "mcp", tool.exclusive, seen)
        for t in self.registry.all():
            out[t.name] = CatalogEntry(t.name, t.description, t.input_schema, "python", t.exclusive, now)
        return dict(sorted(out.items()))

    def specs(self) -> dict[str, ToolSpec]:
        return {name: e.spec() for name, e in self.entries().items()}

    async def publish(self, redis: aioredis.Redis, max_age_s: float, now: float | None = None) -> None:
        """Write this view to Redis as `owner`'s; remove what no live tools process serves
        (the entries of processes that are gone, what this one forgot, what is stale)."""
        await publish_entries(redis, owner=self.owner, entries=self.entries(now), max_age_s=max_age_s,
                              alive=self.alive, now=now)

    async def withdraw(self, redis: aioredis.Redis, max_age_s: float) -> None:
        """This process stops: its tools leave the catalog, unless a live process serves them too."""
        await withdraw(redis, owner=self.owner, max_age_s=max_age_s, alive=self.alive)

    def _tell_conflict(self, conflict: ToolConflict) -> None:
        told = (conflict.name, conflict.services)
        if told in self._conflicts_told:  # each round sees it again: say it once
            return
        self._conflicts_told.add(told)
        offered = ", ".join(conflict.services)
        if conflict.resolution == "refused":
            log.error("tool %s is offered by several providers (%s): refused, no call goes to any of them; "
                      "pin one with LOOPWIRE_TOOL_PROVIDERS", conflict.name, offered)
        elif conflict.resolution == "pinned":
            log.warning("tool %s is offered by %s; served by %s only (LOOPWIRE_TOOL_PROVIDERS)",
                        conflict.name, offered or "no provider", conflict.served_by)
        elif conflict.resolution == "mcp":
            log.warning("tool %s is an MCP server's tool and a provider's (%s); %s is used",
                        conflict.name, offered, conflict.served_by)
        else:
            log.warning("tool %s is an in-process tool and a provider's (%s); the in-process one is used",
                        conflict.name, offered)
