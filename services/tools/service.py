"""The tools service: runs the tool calls the router sends and answers with their results.

    router --ExecuteTools (work.tools.execute)--> tools --ToolsResult (work.router.result)--> router
    (the result is a call instead when the router runs in this process: shared/runtime/dispatcher.py)

The handler is a shell around :class:`~loopwire.tools.executor.Executor`: decode, run the
calls, hand each call of a batch of several to the router as it completes (a
ToolCallFinished: the router emits its `tool.result` and `tools.progress`), hand over the
ToolsResult (the router emits the events of the calls not reported yet: a single call's),
return (the handler runner acks, and heartbeats JetStream meanwhile: shared/runtime/chain.py).
The service emits no event of a result itself. Each result is recorded before anything is
handed over (a single call's while it is written, under a fresh claim: executor.py), so a
redelivered envelope re-runs only the calls that never finished.

In the background it discovers NATS tool providers every `discovery_interval_s` and
publishes the catalog (in-process + discovered tools) to Redis for the memory service, as
this process's own (it answers `<prefix>.rpc.tools.alive.<replica>` while it runs, and
withdraws its tools when it stops: shared/stores/tool_catalog.py);
`<prefix>.api.tools.list` answers with that catalog (core request/reply, one replica).
MCP servers named in LOOPWIRE_MCP_SERVERS are connected at start (mcp_client.py) and
their tools join the catalog; `<prefix>.rpc.tools.call` runs one call outside any run for
`loopwire mcp` (direct_call.py).
It also listens on `<prefix>.ctl.<sid>.cancel` (core NATS, best effort; body optional,
``{"run_id": ...}`` narrows it to one run): in-flight calls of that session stop with a
"cancelled" error result, which is not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from faststream.nats import NatsBroker
from faststream.nats.annotations import NatsMessage
from nats import errors as nats_errors
from pydantic import ValidationError

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import (
    ExecuteTools,
    ToolCall,
    ToolCallFinished,
    ToolResultItem,
    ToolsResult,
)
from loopwire.shared.contract.event_fields import ErrorFields
from loopwire.shared.contract.protocol import error_reply
from loopwire.shared.contract.redaction import register_secret
from loopwire.shared.runtime.chain import Delivery, decode
from loopwire.shared.runtime.inflight import CancelSignal, InflightSteps
from loopwire.shared.runtime.redelivery import Undeliverable
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.tool_catalog import catalog_max_age, read_catalog_entries

from .catalog import Catalog
from .direct_call import DirectCalls
from .discovery import Discovery
from .executor import Executor
from .mcp_config import parse_servers, secret_values
from .recording import Recordings
from .registry import ToolRegistry, default_registry, load_modules
from .settings import ToolsSettings

if TYPE_CHECKING:
    from .mcp_client import McpServers

log = logging.getLogger("loopwire.tools")

DIRECT_CALLS_AT_ONCE = 16
"""`rpc.tools.call` requests one replica runs at the same time."""

OWNER_ALIVE_TIMEOUT_S = 1.0
"""How long a publish waits for another tools process to say it runs (most answer in ms)."""

MCP_START_WAIT_S = 15.0
"""How long the service's start waits for its MCP servers' first connection (and their
tools) before it takes work without the ones still missing; they join when they connect."""


class ToolsService:
    name = "tools"

    def __init__(self, ctx: ServiceContext[ToolsSettings], registry: ToolRegistry | None = None) -> None:
        self.ctx = ctx
        self.registry = registry if registry is not None else default_registry
        self.catalog = Catalog(self.registry, pins=ctx.settings.tool_providers, owner=ctx.replica_id,
                               alive=self._owner_alive)
        self.discovery: Discovery | None = None
        self.executor: Executor | None = None
        self.mcp: McpServers | None = None  # LOOPWIRE_MCP_SERVERS' connections
        self.direct: DirectCalls | None = None
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._cancel_sub: Any = None
        self._alive_sub: Any = None
        self._inflight = InflightSteps(ctx.subjects)
        self._round_started = 0.0
        """When the last finished discovery round sent its $SRV.INFO (monotonic)."""
        self._extra_round = asyncio.Lock()
        self._republish: asyncio.Task[None] | None = None
        self._catalog_dirty = False

    # -- lifecycle ----------------------------------------------------------------------------
    def register(self, broker: NatsBroker) -> None:
        self.ctx.work_subscriber(self.ctx.subjects.tools_execute, "tools",
                                 max_workers=self.ctx.settings.tools_max_handlers)(self.handle)
        broker.subscriber(self.ctx.subjects.tools_list,
                          queue=f"{self.ctx.settings.subject_prefix}-tools")(self.on_tools_list)
        # Calls run for as long as their tools take: several at once, as in runs.
        broker.subscriber(self.ctx.subjects.tools_call, queue=f"{self.ctx.settings.subject_prefix}-tools",
                          max_workers=DIRECT_CALLS_AT_ONCE)(self.on_tools_call)

    async def start(self) -> None:
        settings = self.ctx.settings
        loaded = load_modules(settings.tool_modules)
        if loaded:
            log.info("tool modules %s loaded: %d in-process tools", ", ".join(loaded), len(self.registry))
        servers = parse_servers(settings.mcp_servers)  # a bad entry stops the start, clearly
        for secret in secret_values(servers):
            register_secret(secret, min_length=4)
        if servers:
            from .mcp_client import McpServers  # the MCP SDK, only when there are servers

            self.mcp = McpServers.from_config(servers, on_change=self._mcp_changed)
            self.catalog.mcp = self.mcp
            self.mcp.start()
        nc = self.ctx.bus.nc
        self.discovery = Discovery(nc, settings.discovery_misses,
                                   max_wait_s=min(2.0, max(0.5, settings.discovery_interval_s)))
        self.catalog.providers = self.discovery.table
        self.executor = Executor(self.catalog, self.ctx.steps, nc, default_timeout_s=settings.tool_timeout_s,
                                 attempt_timeout_s=settings.tool_attempt_timeout_s,
                                 refresh=self._refresh_soon,
                                 blobs=self.ctx.blobs, large_content_bytes=settings.large_content_bytes,
                                 on_protocol_error=self._bad_reply, claim_ttl_s=settings.ack_wait_s,
                                 recordings=Recordings(self.ctx.events))
        self.direct = DirectCalls(self.catalog, self.executor, self.ctx.bus, settings=settings, refresh=self._refresh_soon)
        if self.mcp is not None:
            await self.mcp.wait_connected(MCP_START_WAIT_S)
        self._cancel_sub = await nc.subscribe(self.ctx.subjects.cancel_all, cb=self._inflight.on_notice)
        # Before the first publish: a sibling that asks must find this process there.
        self._alive_sub = await nc.subscribe(self.ctx.subjects.tools_alive(self.catalog.owner), cb=self._answer_alive)
        try:
            await self.refresh()
        except Exception:
            log.exception("first tool discovery round failed; retrying in the background")
        self._ready.set()
        self._loop_task = asyncio.create_task(self._discovery_loop(), name="tools-discovery")

    async def stop(self) -> None:
        self._stopping.set()
        if self.mcp is not None:
            await self.mcp.stop()  # stdio servers are this replica's processes: end them
        if self._loop_task is not None:
            self._loop_task.cancel()
            # Bounded: the flag ends the loop even if a library swallowed the cancel.
            await asyncio.wait({self._loop_task}, timeout=5)
            self._loop_task = None
        if self._republish is not None:
            await asyncio.wait({self._republish}, timeout=5)
        try:
            await self.catalog.withdraw(self.ctx.redis, catalog_max_age(self.ctx.settings))
        except Exception as exc:  # the next tools process to publish removes them
            log.warning("could not withdraw this process's tools from the catalog: %s", exc)
        for sub in (self._cancel_sub, self._alive_sub):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        self._cancel_sub = self._alive_sub = None

    # -- discovery ------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """One discovery round, then the catalog to Redis."""
        assert self.discovery is not None
        started = time.monotonic()
        report = await self.discovery.run_round()
        self._round_started = max(self._round_started, started)
        if report.added or report.forgotten:
            log.debug("discovery: %d providers answered, %d new, %d forgotten",
                      report.seen, len(report.added), len(report.forgotten))
        await self.catalog.publish(self.ctx.redis, catalog_max_age(self.ctx.settings))

    async def _answer_alive(self, msg: Any) -> None:
        with contextlib.suppress(Exception):
            await msg.respond(b"{}")

    async def _owner_alive(self, owner: str) -> bool:
        """Whether the tools process `owner` runs: False only on NATS's no-responders (its
        connection, and its subscription, are gone); a slow answer or our own NATS trouble
        proves nothing."""
        try:
            await self.ctx.bus.nc.request(self.ctx.subjects.tools_alive(owner), b"", timeout=OWNER_ALIVE_TIMEOUT_S)
        except nats_errors.NoRespondersError:
            return False
        except Exception:
            return True
        return True

    def _mcp_changed(self) -> None:
        """An MCP server connected or changed its tools: publish the catalog now, not at
        the next round (one publish at a time; a change during one is published after it)."""
        self._catalog_dirty = True
        if self._ready.is_set() and not self._stopping.is_set() and (
                self._republish is None or self._republish.done()):
            self._republish = asyncio.create_task(self._publish_catalog(), name="tools-mcp-publish")

    async def _publish_catalog(self) -> None:
        while self._catalog_dirty:
            self._catalog_dirty = False
            try:
                await self.catalog.publish(self.ctx.redis, catalog_max_age(self.ctx.settings))
            except Exception:
                log.exception("publishing the tool catalog failed; the next discovery round tries again")
                return

    async def _refresh_soon(self) -> None:
        """An unknown tool: one discovery round that began after it was asked for. A round
        that began earlier, even one that finished a moment ago, may have missed a provider
        that started just before the call (another replica's round put it in the shared
        catalog the model was offered), and "unknown tool" costs the model a turn. Callers
        waiting together share the round that begins after them: unknown tools cost at
        most one round at a time."""
        asked = time.monotonic()
        async with self._extra_round:
            if self._round_started < asked:
                await self.refresh()

    async def _discovery_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ctx.settings.discovery_interval_s):
                    await self._stopping.wait()
            if self._stopping.is_set():
                return
            try:
                await self.refresh()
            except (nats_errors.ConnectionDrainingError, nats_errors.ConnectionClosedError):
                return  # the process is stopping: its connection drains before the services stop
            except Exception:  # NATS or Redis hiccup: the next round tries again
                log.exception("tool discovery round failed")

    # -- the work handler -------------------------------------------------------------------------
    async def handle(self, msg: Delivery) -> None:
        """Settled by the handler runner (shared/runtime/chain.py), which keeps the message alive
        while the calls run: returns when the ToolsResult is on its way to the router;
        raises when our own effects failed (Redis, NATS), and the redelivery re-runs only
        the calls that never recorded a result."""
        try:
            env = decode(msg, ExecuteTools)
        except ValidationError as exc:
            raise Undeliverable(f"a malformed ExecuteTools envelope: {exc}") from None
        async with asyncio.timeout(self.ctx.settings.ack_wait_s / 2):
            await self._ready.wait()  # start() has not finished: modules, first discovery
        assert self.executor is not None

        # One call's report at a time, each applied before the next is sent: the router
        # numbers `completed` in the order the calls finish, even when two finish at once.
        in_order = asyncio.Lock()

        async def report(item: ToolResultItem) -> None:
            """The finished call, to the router that emits its events."""
            finished = ToolCallFinished(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id,
                                        turn=env.turn, trace=env.trace, result=item, total=len(env.calls))
            async with in_order:
                await self.ctx.dispatch.send(finished, msg_id=message_ids.call_finished_msg_id(env.step_id, item.tool_use_id),
                                             replica=env.result_to)

        with self._inflight.track(env.session_id, env.run_id) as cancel:
            await self._run(env, msg, report, cancel=cancel)

    async def _run(self, env: ExecuteTools, msg: Delivery, report: Callable[[ToolResultItem], Awaitable[None]],
                   *, cancel: CancelSignal) -> None:
        assert self.executor is not None
        # Several calls: each is reported as it finishes, so the client sees the batch
        # progress. A single call's events go out with the step's transition, in the same
        # Redis write as the router's state: the same events, in the same order, in every layout.
        # A router that did not ask for reports (an older one) emits them all with the result.
        per_call = len(env.calls) > 1 and env.report_calls

        async def deliver(results: list[ToolResultItem]) -> None:
            # results_reported=False: the router emits every event (envelopes.ToolsResult).
            result = ToolsResult(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id,
                                 turn=env.turn, trace=env.trace, results=results, results_reported=False)
            await self.ctx.dispatch.send(result, msg_id=message_ids.result_msg_id(env.step_id), replica=env.result_to)

        await self.executor.execute(env, on_result=report if per_call else None, cancel=cancel, then=deliver)

    async def _bad_reply(self, env: ExecuteTools, call: ToolCall, problem: str) -> None:
        await self.ctx.bus.emit(env.session_id, env.run_id, "error", key=message_ids.event_key("bad_tool_reply", call.tool_use_id),
                                fields=ErrorFields(code="bad_tool_reply", message=f"tool {call.name}: {problem}"))

    # -- one call outside any run (loopwire mcp) ------------------------------------------------
    async def on_tools_call(self, msg: NatsMessage) -> bytes:
        if self.direct is None or not self._ready.is_set():
            return orjson.dumps(error_reply("unavailable", "the tools service is starting"))
        return await self.direct.handle(msg.body)

    # -- the tools.list query ----------------------------------------------------------------------
    async def on_tools_list(self, msg: NatsMessage) -> bytes:
        """`<prefix>.api.tools.list` (a contract addition): the published catalog, which is
        what the memory service offers the model, so a client can wait for its tool."""
        try:
            entries = await read_catalog_entries(self.ctx.redis, catalog_max_age(self.ctx.settings))
        except Exception as exc:
            log.exception("tools.list failed")
            return orjson.dumps(error_reply("internal", f"tools.list failed: {exc}"))
        return orjson.dumps({"tools": [
            {"name": e.name, "description": e.description, "input_schema": e.input_schema, "source": e.source}
            for e in entries.values()], "conflicts": [c.to_dict() for c in self.catalog.conflicts()]})
