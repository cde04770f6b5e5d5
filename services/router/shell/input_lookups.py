"""What the core needs from the outside world for an input, read by the shell (I/O) and
passed into the input as data.

For a `start`: the strategy config chosen by actor and expectation (strategy.py), the
workspace (`metadata.workspace` resolved under LOOPWIRE_WORKSPACE_ROOTS, and its snapshot
for the profiles that show one: workspace_snapshot.py), the tools of `tools` the catalog does not
hold, and a child run's parent depth (subagent.py). For every input that may start a
run (start, message, steer): the names the catalog holds, for the run's `tools_active`. For a generation that calls tools:
their input schemas, from the tools catalog, for the plan gate (strategy_loop.py). A
lookup that fails is a help missing, never a reason to fail the input.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from loopwire.shared.contract.messages import tool_uses
from loopwire.shared.contract.protocol import RESERVED_TOOL_NAMES
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.tool_catalog import CatalogCache

from ..core import subagent
from ..core.inputs import AdmissionInput, BaseInput, GenerationInput, MessageInput, StartInput, SteerInput
from ..core.profiles import PROFILES
from ..core.settings import RouterSettings
from . import workspace_snapshot
from .quota_keeper import QuotaKeeper
from .strategy_store import StrategyStore

log = logging.getLogger("loopwire.router")


_COUNTED = (StartInput, MessageInput, SteerInput, GenerationInput, AdmissionInput)
"""Inputs that may start a run or add usage: their tenant's day is read for them."""


class InputLookups:
    def __init__(self, ctx: ServiceContext[RouterSettings], quotas: QuotaKeeper | None = None) -> None:
        self.ctx = ctx
        self.quotas = quotas
        self._catalog: CatalogCache | None = None
        """The tool catalog, for the schemas of the plan gate (reused for up to a second)."""
        self._strategies: StrategyStore | None = None

    @property
    def strategies(self) -> StrategyStore:
        """Strategy configs (LOOPWIRE_STRATEGY_FILE and Redis), made on first use."""
        if self._strategies is None:
            self._strategies = StrategyStore(self.ctx.settings.strategy_file, self.ctx.redis)
        return self._strategies

    async def look_up(self, sid: str, inp: BaseInput) -> None:
        """What the core needs from the outside world for this input, read here (I/O) and
        passed in as data: a start's strategy config, workspace snapshot and parent depth;
        a generation's tool schemas for the plan gate; the tenant's usage of the day."""
        if self.quotas is not None and isinstance(inp, _COUNTED):
            inp.tenant_today = await self.quotas.today(sid, inp.now_ns)
        if isinstance(inp, StartInput | MessageInput | SteerInput):
            inp.catalog_tools = await self._catalog_names(sid)
        if isinstance(inp, StartInput):
            body = inp.body
            config = await self.strategies.resolve(body.strategy.actor, body.strategy.expectation)
            inp.strategy = config.model_dump(mode="json") if config is not None else None
            roots = self.ctx.settings.workspace_roots
            path, refusal = await asyncio.to_thread(workspace_snapshot.resolve_workspace, body.metadata, roots)
            inp.workspace_refusal = refusal
            inp.workspace_path = str(path) if path is not None else None
            if path is not None and PROFILES[body.profile].snapshots_workspace:
                try:
                    # Bounded: a huge work tree must not hold the session's ingress.
                    inp.workspace = await asyncio.wait_for(asyncio.to_thread(workspace_snapshot.gather, path, roots),
                                                           workspace_snapshot.GATHER_TIMEOUT_S)
                except Exception as exc:  # a snapshot is a help, never a reason to fail the start
                    log.warning("session %s: workspace snapshot failed: %s", sid, exc)
                    inp.workspace = {"error": f"the snapshot failed: {exc}"}
            inp.unknown_tools = await self._unknown_tools(sid, body.tools)
            parent = inp.parent_session_id = inp.parent_session_id or subagent.parent_of(body.metadata)
            if parent is not None:
                raw, _ = await self.ctx.sessions.load(parent)
                if raw is not None:
                    parent_state = SessionState.load(raw, parent)
                    config_of = parent_state.run.config if parent_state.run else parent_state.last_config
                    inp.parent_depth = config_of.subagent_depth if config_of else 0
        elif isinstance(inp, GenerationInput) and inp.result.message:
            names = {b.get("name") for b in tool_uses(inp.result.message)}
            if names:
                try:
                    if self._catalog is None:
                        self._catalog = CatalogCache(self.ctx.redis, self.ctx.settings)
                    catalog = await self._catalog.get([n for n in names if isinstance(n, str)])
                except Exception as exc:  # the tools service validates again before any call
                    log.warning("session %s: tool catalog unreadable, plan gate without schemas: %s", sid, exc)
                else:
                    inp.tool_schemas = {n: catalog[n].input_schema for n in names if n in catalog}

    async def _catalog_of(self, names: list[str] | None) -> dict[str, Any]:
        if self._catalog is None:
            self._catalog = CatalogCache(self.ctx.redis, self.ctx.settings)
        return await self._catalog.get(names)

    async def _catalog_names(self, sid: str) -> list[str] | None:
        """The names the tool catalog holds now (cached for up to a second), or None."""
        try:
            return sorted(await self._catalog_of(None))
        except Exception as exc:  # the tools a run may use are a report, never a reason to fail
            log.warning("session %s: tool catalog unreadable, the run's tools_active not resolved: %s", sid, exc)
            return None

    async def _unknown_tools(self, sid: str, names: list[str] | None) -> list[str]:
        """The names of a start's `tools` the catalog does not hold (reserved tools, which
        loopwire answers itself, are always known)."""
        wanted = [n for n in names or [] if n not in RESERVED_TOOL_NAMES]
        if not wanted:
            return []
        try:
            catalog = await self._catalog_of(wanted)
        except Exception as exc:  # a warning is a help; an unreadable catalog is no reason to fail
            log.warning("session %s: tool catalog unreadable, unknown tools not checked: %s", sid, exc)
            return []
        return [n for n in wanted if n not in catalog]
