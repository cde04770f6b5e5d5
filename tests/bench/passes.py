"""One pass of `make bench`: a set of servers, the loopwire layouts measured on them one
after the other (the trace, the idle processes, the load), then the floors on the same
servers. run_bench.py makes two: with JetStream's `sync_interval: always` and with
nats-server's default."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis.asyncio as aioredis

from . import durable_floor, lean
from .driver import BenchDriver, alternated, wait_for_tool
from .floor import Hop, plan_to_json
from .floor_runs import (
    durable_side,
    floor_plan,
    floor_sizes,
    measure_durable_floor,
    measure_raw_floor,
    start_durable_floor,
    start_responders,
    stop_all,
)
from .fork_cost import measure_fork
from .layouts import Servers, System, bench_layouts, start_servers
from .measuring import LoadSide, Measured, connected, counter, log, measure_load, summary
from .redis_bytes import session_bytes
from .targets import ms, rates_note
from .trace import TurnCost, trace_turns

DEPLOYED = ("split1", "split")
"""The layouts compose and Helm deploy: the floor's plan comes from the first of them traced."""
PLAN_FROM = (*DEPLOYED, "workers", "up")
"""Whose trace the floor's plan comes from, the first traced of these (a run of other layouts only)."""
LOOPWIRE_STREAMS = {"LOOPWIRE_WORK": "work", "LOOPWIRE_EVENTS": "events", "LOOPWIRE_INGRESS": "ingress"}
T = TypeVar("T")


def run_async(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on uvloop when available (as the services do), else asyncio."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - not on Windows
        return asyncio.run(coro_fn())
    return uvloop.run(coro_fn())


@dataclass
class FloorBeside:
    """The durable floor's responders, up on a layout's servers (Pass.start_floor)."""

    sizes: list[int]
    procs: list[subprocess.Popen[str]]
    loads: bool
    """Whether its load runs take turns with the layout's too (a layout with targets)."""


async def measure_layout(m: Measured, servers: Servers, services: dict[str, int], args: argparse.Namespace,
                         extra: Callable[[BenchDriver], Awaitable[None]] | None = None,
                         floor: FloorBeside | None = None) -> None:
    """With `floor`, the durable floor's single sessions (and, `floor.loads`, its load runs)
    take turns with the layout's, and the layout is judged against those."""
    name = m.data["name"]
    async with contextlib.AsyncExitStack() as stack:
        nc, r, driver = await stack.enter_async_context(connected(servers, BenchDriver))
        log(f"{name}: warm-up, {args.warmup_sessions} sessions × 5 tool-turns")
        warm = await driver.run_load("warm", args.warmup_sessions, 5, timeout=args.load_timeout)
        if warm.failures:
            raise RuntimeError(f"warm-up failed: {warm.failures[:3]}")
        side = LoadSide(lambda: driver.run_load("load", args.sessions, args.turns, timeout=args.load_timeout),
                        {**services, **servers.pids(), "bench client": os.getpid()},
                        counter(nc, r, servers, LOOPWIRE_STREAMS), LOOPWIRE_STREAMS)
        floor_side = None
        if floor is None:
            log(f"{name}: single session, {args.single} × {args.turns} tool-turns one at a time")
            m.data["single"] = summary(await driver.run_sequential("single", args.single, args.turns))
        else:
            sizes = floor.sizes
            fnc, frs, fdriver = await stack.enter_async_context(
                connected(servers, lambda c: durable_floor.DurableFloorDriver(c, sizes)))
            await fdriver.run_load("warm", args.warmup_sessions, 5, timeout=args.load_timeout)
            log(f"{name}: single session, {args.single} × {args.turns} tool-turns one at a time, "
                "taking turns with the durable floor's")
            mine, floors = await alternated(driver, fdriver, args.single, args.turns)
            m.data["single"], m.data["single_floor"] = summary(mine), summary(floors)
            if floor.loads:
                floor_side = durable_side(fdriver, fnc, frs, servers, floor.procs, args)
        log(f"{name}: load, {args.sessions} concurrent sessions × {args.turns} tool-turns, {args.load_runs} run(s)"
            + (", taking turns with the durable floor's" if floor_side is not None else ""))
        await measure_load(m, side, args.load_runs, floor_side)
        log(f"{name}: {m.data['load']['turns_per_s']:.0f} turns/s{rates_note(m.data)}, "
            f"single p50 {ms(m.data['single']['p50_ms'])}, {m.data['load']['n_failures']} failed sessions")
        if extra is not None:
            await extra(driver)


async def measure_bytes(driver: BenchDriver, redis_url: str, sizes: list[int], res: dict[str, Any]) -> None:
    r = aioredis.Redis.from_url(redis_url)
    try:
        for n in sizes:
            run, ended = await driver.run_one(f"bytes{n}", n, timeout=300, max_turns=n + 10)
            if ended.get("status") != "completed" or len(run.messages) != n + 1:
                res["notes"].append(f"bytes session of {n} turns ended {ended.get('status')} "
                                    f"with {len(run.messages)} messages")
            res["bytes"][str(n)] = await session_bytes(r, run.sid, [str(ended.get("run_id"))])
            log(f"Redis bytes after {n} tool-turns: {res['bytes'][str(n)]['total']}")
    finally:
        await r.aclose()


def nats_settings(servers: Servers) -> str:
    conf = Path(servers.nats.workdir or "") / "nats.conf"
    sync = "sync_interval: always" if conf.exists() and "sync_interval: always" in conf.read_text() else \
        "sync_interval: default"
    version = subprocess.run([servers.nats.argv[0], "--version"], capture_output=True, text=True,
                             check=False).stdout.strip() if servers.nats.argv else "nats-server"
    return f"{version} (JetStream file storage, {sync})"


async def server_settings(servers: Servers) -> dict[str, str]:
    """What the servers were started with, read back from them."""
    r = aioredis.Redis.from_url(servers.redis.url)
    try:
        cfg = {**await r.config_get("appendonly"), **await r.config_get("appendfsync")}
        info = await r.info("server")
    finally:
        await r.aclose()
    return {"nats": nats_settings(servers),
            "redis": f"redis-server {info.get('redis_version')} (appendonly {cfg.get('appendonly')}, "
                     f"appendfsync {cfg.get('appendfsync')})"}


def trace_dict(trace: TurnCost) -> dict[str, Any]:
    return {"nats_msgs": trace.nats_msgs, "nats_bytes": trace.nats_bytes, "redis_cmds": trace.redis_cmds,
            "lua_cmds": trace.lua_cmds, "timeline": trace.timeline, "run_events": trace.run_events}


class Pass:
    """One set of servers and what was measured on them: the layouts, then the floors."""

    def __init__(self, servers: Servers, res: dict[str, Any]) -> None:
        self.servers = servers
        self.res = res
        self.system: System | None = None
        self.cluster: Servers | None = None
        """The clusters a layout runs on (with_redis_cluster, with_nats_cluster): stopped after it."""
        self.responders: list[subprocess.Popen[str]] = []
        self.traces: dict[str, TurnCost] = {}
        self.floor_sizes: list[int] | None = None
        """The durable floor's envelope sizes while its responders run (start_floor)."""
        self.floor_plan: tuple[Hop, ...] = ()

    def start_floor(self, args: argparse.Namespace, traces: dict[str, TurnCost]) -> None:
        """Start the durable floor's responders on this pass's servers, once, with the plan of
        the deployed layout's trace (PLAN_FROM): from then on every layout's single sessions
        alternate with the floor's, and the floor's own measurement (floors) uses them too."""
        if self.responders or args.no_floors:
            return
        specs = bench_layouts(args.workers)
        plan_key = next((k for k in PLAN_FROM if k in traces), None)
        trace = traces.get(plan_key) if plan_key else None
        plan, sizes = floor_plan(trace), floor_sizes(trace)
        self.res["floor_plan"] = [(h.service, list(h.redis), list(h.events)
                                   + [f"{kind} every {every} turns" for kind, every in h.occasional]
                                   + [f"{kind} once per run" for kind in h.per_run]) for h in plan]
        self.res["floor_plan_from"] = specs[plan_key].name if plan_key else "the design (no trace)"
        self.res["floor_sizes"] = sizes
        log(f"floors: envelopes of {sizes} bytes, Redis per hop {[len(h.redis) for h in plan]}")
        self.responders = start_durable_floor(self.servers, plan, sizes, args.floor_responders)
        self.floor_sizes, self.floor_plan = sizes, plan

    def layouts(self, args: argparse.Namespace, keys: list[str], *, trace: bool, lean_in: str | None = None,
                bytes_in: str | None = None, bytes_sizes: list[int] | None = None,
                fork_in: str | None = None, plan_traces: dict[str, TurnCost] | None = None) -> None:
        """`plan_traces`: the traces the floor's plan comes from when this pass traces none
        (the first pass's); otherwise the floor starts once the deployed layout is traced."""
        servers, specs = self.servers, bench_layouts(args.workers)
        if plan_traces is not None:
            self.start_floor(args, plan_traces)
        for key in keys:
            spec = specs[key]
            m = Measured(key, spec.name, "loopwire", spec)
            log(f"starting {spec.name}: {', '.join(spec.commands)}")
            t0 = time.monotonic()
            on = servers.with_redis_cluster(spec.redis_masters) if spec.redis_masters else servers
            if spec.nats_nodes:
                on = on.with_nats_cluster(spec.nats_nodes, sync_always=args.nats_sync == "always")
                log(f"{spec.name}: NATS cluster {on.nats_url}")
            self.cluster = on if spec.redis_masters or spec.nats_nodes else None
            system = self.system = System(on, spec)
            system.start()
            run_async(lambda: wait_for_tool(on.redis_url, "noop", cluster=bool(spec.redis_masters)))  # noqa: B023
            m.data["start_s"] = time.monotonic() - t0
            if key == lean_in:
                log(f"{spec.name}: RSS and CPU of the idle processes ({lean.IDLE_WINDOW_S:g} s)")
                m.data["lean"] = {"window_s": lean.IDLE_WINDOW_S,
                                  "after_start": run_async(functools.partial(lean.idle_facts, system.pids()))}
            if trace and not spec.redis_masters:  # MONITOR sees one server: the one-Redis layouts' trace
                log(f"{spec.name}: counting the hops of one tool-turn")
                self.traces[key] = run_async(lambda: trace_turns(on.nats_url, servers.redis.url))  # noqa: B023
                m.data["trace"] = trace_dict(self.traces[key])
                if key in DEPLOYED:
                    self.start_floor(args, self.traces)

            async def after_load(driver: BenchDriver) -> None:
                if key == bytes_in and bytes_sizes:  # noqa: B023 - run at once
                    await measure_bytes(driver, servers.redis.url, bytes_sizes, self.res)
                if key == fork_in:  # noqa: B023
                    log(f"{spec.name}: forks of a session of 1,000 events")  # noqa: B023
                    fork = self.res["fork"] = {"layout": spec.name, **await measure_fork(on.nats_url,  # noqa: B023
                                                                                        servers.redis.url)}
                    log(f"fork p50 {ms(fork['p50_ms'])}, p99 {ms(fork['p99_ms'])} "
                        f"({fork['events']} events, {fork['messages']} messages)")

            pids = system.pids()
            extra = after_load if key == fork_in or (key == bytes_in and bytes_sizes) else None
            # The floor's sessions alternate with this layout's where both run on this pass's
            # servers (a layout on clusters of its own is measured for reference only).
            beside = FloorBeside(self.floor_sizes, self.responders, loads=spec.targets is not None) \
                if self.floor_sizes is not None and on is servers else None
            run_async(lambda: measure_layout(m, on, pids, args, extra, beside))  # noqa: B023 - run at once
            if on.redis_cluster is not None:
                m.data["redis_keys_per_master"] = on.redis_cluster.keys_per_master()
                log(f"{spec.name}: keys per master {m.data['redis_keys_per_master']}")
            if on.nats_cluster is not None:
                m.data["stream_leaders"] = on.stream_leaders()
                log(f"{spec.name}: stream leaders {m.data['stream_leaders']}")
            if key == lean_in:
                m.data["lean"]["after_load"] = run_async(functools.partial(lean.idle_facts, system.pids()))
                log(f"{spec.name}: from the exec of each service to its first work handled")
                m.data["lean"]["ready_s"] = run_async(functools.partial(lean.ready_times, system, on.nats_url))
            self.res["layouts"][key], self.res["order"] = m.data, [*self.res["order"], key]
            system.stop()
            self.system = None
            self.stop_clusters()

    def floors(self, args: argparse.Namespace, traces: dict[str, TurnCost], *, raw: bool) -> None:
        servers = self.servers
        self.start_floor(args, traces)  # running already when a layout was traced before
        assert self.floor_sizes is not None
        sizes = self.floor_sizes
        plan = self.floor_plan
        m = Measured("floor_durable", "durable floor", "floor")
        m.data["processes"] = args.floor_responders
        run_async(lambda: measure_durable_floor(m, servers, self.responders, sizes, args))
        self.res["layouts"]["floor_durable"], self.res["order"] = m.data, [*self.res["order"], "floor_durable"]
        stop_all(self.responders)
        self.responders, self.floor_sizes = [], None
        if not raw:
            return
        self.responders = start_responders("tests.bench.floor", 1, servers,
                                           ["--reply-sizes", ",".join(map(str, sizes[1:] + sizes[:1])),
                                            "--plan", plan_to_json(plan)])
        m = Measured("floor_raw", "raw floor", "floor")
        m.data["processes"] = 1
        run_async(lambda: measure_raw_floor(m, servers, self.responders, sizes, args))
        self.res["layouts"]["floor_raw"], self.res["order"] = m.data, [*self.res["order"], "floor_raw"]
        stop_all(self.responders)
        self.responders = []

    def stop_clusters(self) -> None:
        if self.cluster is not None:
            self.cluster.stop_redis_cluster()
            self.cluster.stop_nats_cluster()
            self.cluster = None

    def stop(self, failed: bool) -> None:
        if self.system is not None:
            for path in self.system.stop(keep_logs=failed):
                log(f"kept log {path}")
            self.system = None
        self.stop_clusters()
        stop_all(self.responders)
        self.servers.stop()


def start_pass(sync_always: bool, res: dict[str, Any]) -> Pass:
    servers = start_servers(sync_always=sync_always)
    log(f"nats-server {servers.nats_url} (monitor {servers.monitor_url}), redis-server {servers.redis.url}")
    res["servers"] = run_async(lambda: server_settings(servers))
    return Pass(servers, res)
