"""Run loopwire services in this process: `loopwire up` (all five) and `loopwire serve NAME`.

Start-up order: connect NATS, create the streams (idempotent, retried until JetStream
answers: shared/runtime/streams.py), open the publishing bus, start each service's
background work, then FastStream's subscribers (queries, RPC) and the work consumers
(shared/runtime/work_consumer.py; their binding retried the same way), then serve
/metrics, /healthz and /readyz. SIGTERM/SIGINT: stop taking new work, let in-flight
handlers finish within the grace period (an unfinished one is redelivered by JetStream,
because it never acked), close connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from faststream.nats import NatsBroker

from loopwire.settings import Settings
from loopwire.shared.observability.context_middleware import ContextMiddleware
from loopwire.shared.observability.http_server import Handle, start_http_server
from loopwire.shared.observability.message_metrics import message_metrics_middleware
from loopwire.shared.observability.metrics import sample_consumers
from loopwire.shared.observability.tracing import (
    broker_middlewares,
    set_capture_content,
    setup_tracing,
    shutdown_tracing,
)
from loopwire.shared.runtime import gc_tuning, nats_headers
from loopwire.shared.runtime.chain_balance import ChainBalance
from loopwire.shared.runtime.credentials import (
    display_url,
    nats_security,
    nats_servers,
    register_configured_secrets,
)
from loopwire.shared.runtime.server_versions import UnsupportedServer, check_nats, check_redis
from loopwire.shared.runtime.service_context import Service, ServiceContext, build_context
from loopwire.shared.runtime.streams import StreamSetupError, ensure_streams
from loopwire.shared.stores.redis_connection import answers, warn_if_volatile

log = logging.getLogger("loopwire.launcher")

SERVICE_NAMES = ("router", "llm", "tools", "memory", "transcripts")


SERVICE_CLASSES = {
    "router": "loopwire.router.shell.service:RouterService",
    "llm": "loopwire.llm.service:LlmService",
    "tools": "loopwire.tools.service:ToolsService",
    "memory": "loopwire.memory.service:MemoryService",
    "transcripts": "loopwire.transcripts.service:TranscriptsService",
}
"""Service name -> where its class is. A process imports only the services it runs:
`loopwire serve tools` never loads the llm's model SDK, nor the router's modules."""


def service_class(name: str) -> Callable[[ServiceContext[Settings]], Service]:
    if name not in SERVICE_CLASSES:
        raise ValueError(f"unknown service {name!r}; choose from {', '.join(SERVICE_NAMES)}")
    module, _, attr = SERVICE_CLASSES[name].partition(":")
    return cast(Callable[[ServiceContext[Settings]], Service], getattr(importlib.import_module(module), attr))


def make_broker(settings: Settings, graceful_timeout: float = 5.0) -> NatsBroker:
    return NatsBroker(
        nats_servers(settings),
        # User and password, token, creds, nkey seed, TLS: the same options the CLI's
        # nats-py connection gets (shared/runtime/credentials.py).
        security=nats_security(settings),
        # Per-message access logs go to DEBUG: at hundreds of messages a second they cost
        # more CPU than the work they describe.
        log_level=logging.DEBUG,
        # FastStream's own messages go through our logging set-up (level, JSON lines).
        logger=logging.getLogger("loopwire.faststream"),
        graceful_timeout=graceful_timeout,
        max_reconnect_attempts=-1,
        middlewares=[ContextMiddleware, message_metrics_middleware(), *broker_middlewares()],
    )


@dataclass
class Running:
    """A started set of services in this process."""

    settings: Settings
    ctx: ServiceContext[Settings]
    broker: NatsBroker
    services: list[Service]
    http: Handle | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def ready(self) -> dict[str, bool]:
        nc = self.broker._connection
        nats_ok = bool(nc is not None and nc.is_connected)
        try:
            redis_ok = await answers(self.ctx.redis)
        except Exception:
            redis_ok = False
        # Draining: not ready, so Kubernetes takes the pod out of its Service while it drains.
        return {"nats": nats_ok, "redis": redis_ok, "accepting": not self.ctx.dispatch.stopping}

    async def stop(self) -> None:
        if self.stopped.is_set():
            return
        log.info("stopping %s", ", ".join(s.name for s in self.services))
        self.ctx.dispatch.stopping = True
        for task in self.tasks:
            task.cancel()
        if self.ctx.dispatch.balance is not None:
            await self.ctx.dispatch.balance.stop()
        # The drain: everything below within LOOPWIRE_DRAIN_TIMEOUT_S together, so the
        # process exits inside Kubernetes' grace period (helm: terminationGracePeriodSeconds).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.drain_timeout_s
        # Hops handed off in this process (shared/runtime/chain.py) finish first, while the
        # connection is up to settle their chains' roots; their next hops go to JetStream.
        with contextlib.suppress(Exception):
            await self.ctx.dispatch.wait_for_hops(max(0.0, deadline - loop.time()))
        # The work consumers stop taking messages, hand back those not started, then wait
        # for handlers in flight, which still need the connection and their services (model
        # clients, the memory summarizer, in-process tools): those stop after. A handler
        # still running at the deadline is cancelled and its message handed back
        # (work_consumer.py). FastStream's own subscribers (queries, RPC) stop next, then
        # the connection closes.
        with contextlib.suppress(Exception):
            await self.ctx.stop_consuming(max(0.0, deadline - loop.time()))
        with contextlib.suppress(Exception):
            await self.broker.stop()
        for service in self.services:
            with contextlib.suppress(Exception):
                await service.stop()
        if self.http is not None:
            await self.http.close()
        with contextlib.suppress(Exception):
            await self.ctx.redis.aclose()
        shutdown_tracing()  # flushes spans still in the batch processor
        self.stopped.set()


async def start_services(names: list[str] | tuple[str, ...], settings: Settings,
                         metrics_port: int | None = None) -> Running:
    unknown = [n for n in names if n not in SERVICE_CLASSES]
    if unknown:
        raise ValueError(f"unknown service(s): {', '.join(unknown)}; choose from {', '.join(SERVICE_NAMES)}")
    # Tracing exports only when a standard OTEL_* exporter variable is set.
    register_configured_secrets(settings)
    set_capture_content(settings.otel_capture_content)
    setup_tracing("loopwire" if len(names) > 1 else f"loopwire-{names[0]}")
    nats_headers.install()  # each message's headers parsed in fewer steps (nats_headers.py)
    broker = make_broker(settings)
    ctx = build_context(settings, broker)
    await check_redis(ctx.redis)
    await warn_if_volatile(ctx.redis)
    services = [service_class(name)(ctx) for name in names]
    if settings.local_handover and len(services) > 1:
        ctx.dispatch.in_process = True
        if settings.chain_balance:
            ctx.dispatch.balance = ChainBalance(ctx.subjects.chains, interval_s=settings.chain_balance_interval_s)
    for service in services:
        service.register(broker)
    await broker.connect()
    check_nats(broker._connection)
    # Every replica makes the same streams, retrying until a cluster answers (streams.py).
    js = broker._connection.jetstream(timeout=settings.jetstream_timeout_s)  # type: ignore[union-attr]
    await ensure_streams(js, settings)
    ctx.attach_bus()
    if ctx.dispatch.balance is not None:
        await ctx.dispatch.balance.start(broker._connection)
    # Services first, then consuming: a message redelivered at once (work of a process that
    # died) must find its handler's service started.
    for service in services:
        await service.start()
    await broker.start()
    await ctx.consume()
    running = Running(settings=settings, ctx=ctx, broker=broker, services=services)
    running.tasks.append(asyncio.create_task(_sample_consumers(ctx), name="consumer-sampler"))
    port = settings.metrics_port if metrics_port is None else metrics_port
    if port:
        try:
            running.http = await start_http_server(settings.metrics_host, port, running.ready)
        except OSError as exc:
            log.error("cannot serve /metrics on port %s: %s", port, exc)
    # Last: what start-up made (modules, schemas, clients) is frozen out of every later
    # collection (shared/runtime/gc_tuning.py).
    gc_tuning.apply(settings.gc_thresholds, settings.gc_freeze)
    if settings.gc_idle_check_s > 0:
        idle = gc_tuning.IdleCollector(settings.gc_idle_check_s)
        running.tasks.append(asyncio.create_task(idle.run(), name="idle-collector"))
    log.info("loopwire %s up (NATS %s, Redis %s)", ", ".join(names), display_url(settings.nats_url),
             display_url(settings.redis_url))
    return running


async def _sample_consumers(ctx: ServiceContext[Settings], interval_s: float = 5.0) -> None:
    """Consumer lag (pending, ack pending) of this process's consumers, for /metrics."""
    js = ctx.bus.js
    while True:
        by_stream: dict[str, dict[str, str]] = {}
        for label, (stream, durable) in ctx.consumers.items():
            by_stream.setdefault(stream, {})[label] = durable
        for stream, consumers in by_stream.items():
            await sample_consumers(js, stream, consumers)
        await asyncio.sleep(interval_s)


async def serve_until_signal(names: list[str] | tuple[str, ...], settings: Settings,
                             after_start: Callable[[Running], Awaitable[None]] | None = None,
                             *, on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve until SIGTERM/SIGINT. `on_stop` runs alongside this process's own graceful
    stop (`loopwire up --workers`: stopping the other workers), and is waited for."""
    try:
        running = await start_services(names, settings)
    except (StreamSetupError, UnsupportedServer) as exc:
        # What the operator must change (replicas, the cluster), said once, not as a traceback.
        log.error("cannot start: %s", exc)
        raise SystemExit(1) from None
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop_requested.set)
    try:
        if after_start is not None:
            await after_start(running)
        await stop_requested.wait()
    finally:
        also = asyncio.ensure_future(on_stop()) if on_stop is not None else None
        await asyncio.sleep(0)  # let it begin (signal the workers) before our own stop
        try:
            await running.stop()
        finally:
            if also is not None:
                await also
