"""The two floors' runs (durable_floor.py, floor.py): their plan and envelope sizes taken
from the deployed layout's trace, their responder processes, and one measurement of each
in the same window as a layout (measuring.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import nats
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from . import durable_floor
from .driver import wait_for_tool
from .floor import DEFAULT_PLAN, FloorDriver, Hop, plan_from_trace, plan_to_json
from .layouts import ROOT, Servers, System, bench_layouts, service_env, start_servers
from .measuring import LoadSide, Measured, connected, counter, log, measure_load, summary
from .targets import ms, rates_note
from .trace import TurnCost, trace_turns

FLOOR_STREAMS = {durable_floor.WORK_STREAM: "work", durable_floor.EVENTS_STREAM: "events"}


def floor_sizes(trace: TurnCost | None) -> list[int]:
    """Envelope bytes of the five hops (tools.execute, router.result, memory.assemble,
    llm.generate, router.result), from a trace that saw them as work messages."""
    # Measured with every hop on JetStream (2026-11-30); for a trace of `loopwire up`,
    # which hands them over in-process and does not see them.
    sizes = {"tools.execute": 333, "router.result": 446, "memory.assemble": 1537, "llm.generate": 4631}
    if trace is not None:
        b, n = trace.nats_bytes, trace.nats_msgs
        for k in sizes:
            if n.get(f"work publish {k}"):
                sizes[k] = int(b[f"work publish {k}"] / n[f"work publish {k}"])
    return [sizes["tools.execute"], sizes["router.result"], sizes["memory.assemble"], sizes["llm.generate"],
            sizes["router.result"]]


def floor_plan(trace: TurnCost | None) -> tuple[Hop, ...]:
    if trace is None:
        return DEFAULT_PLAN
    events = {k.removeprefix("event "): v for k, v in trace.nats_msgs.items() if k.startswith("event ")}
    return plan_from_trace(trace.redis_cmds, events, trace.run_events)


def start_responders(module: str, count: int, servers: Servers, extra: list[str]) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, PYTHONPATH=service_env()["PYTHONPATH"])
    procs = []
    for _ in range(count):
        proc = subprocess.Popen([sys.executable, "-m", module, "--nats", servers.nats_url, "--redis", servers.redis.url,
                                 *extra], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            stop_all(procs)
            raise RuntimeError(f"{module} did not start: {line!r}")
    return procs


def start_durable_floor(servers: Servers, plan: tuple[Hop, ...], sizes: list[int],
                        count: int) -> list[subprocess.Popen[str]]:
    """The durable floor's streams on `servers` and `count` responder processes serving
    `plan` with envelopes of `sizes`."""
    asyncio.run(create_floor_streams(servers.nats.url))
    return start_responders("tests.bench.durable_floor", count, servers,
                            ["--sizes", ",".join(map(str, sizes)), "--plan", plan_to_json(plan)])


@contextlib.contextmanager
def beside_the_floor(layout: str, *, sync_always: bool) -> Iterator[tuple[Servers, System, list[int],
                                                                          list[subprocess.Popen[str]]]]:
    """Fresh servers with `layout` started and traced, and the durable floor's two
    responders beside it (their plan and envelope sizes from that trace): what the A/B
    tools of the single-session path start (paired_single.py, hop_times.py). Yields the
    servers, the layout, the sizes and the responders; stops everything on the way out."""
    servers = start_servers(sync_always=sync_always)
    system = System(servers, bench_layouts()[layout])
    responders: list[subprocess.Popen[str]] = []
    try:
        system.start()
        asyncio.run(wait_for_tool(servers.redis_url, "noop"))
        trace = asyncio.run(trace_turns(servers.nats_url, servers.redis.url))
        sizes = floor_sizes(trace)
        responders = start_durable_floor(servers, floor_plan(trace), sizes, 2)
        yield servers, system, sizes, responders
    finally:
        stop_all(responders)
        system.stop()
        servers.stop()


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()


def responder_pids(label: str, procs: list[subprocess.Popen[str]]) -> dict[str, int]:
    return {label if len(procs) == 1 else f"{label} {i + 1}": p.pid for i, p in enumerate(procs)}


def durable_side(driver: durable_floor.DurableFloorDriver, nc: NatsClient, rs: list[aioredis.Redis], servers: Servers,
                 procs: list[subprocess.Popen[str]], args: argparse.Namespace) -> LoadSide:
    """The durable floor's load run (`args.sessions` × `args.turns`) on `driver`, the CPU of
    its responders, the servers and this client, its streams' wire counts."""
    return LoadSide(lambda: driver.run_load("load", args.sessions, args.turns, timeout=args.load_timeout),
                    {**responder_pids("responder", procs), **servers.pids(), "bench client": os.getpid()},
                    counter(nc, rs, servers, FLOOR_STREAMS), FLOOR_STREAMS)


async def measure_durable_floor(m: Measured, servers: Servers, procs: list[subprocess.Popen[str]],
                                sizes: list[int], args: argparse.Namespace) -> None:
    async with connected(servers, lambda nc: durable_floor.DurableFloorDriver(nc, sizes)) as (nc, rs, driver):
        await driver.run_load("warm", args.warmup_sessions, 5, timeout=args.load_timeout)
        m.data["single"] = summary(await driver.run_sequential("single", args.single, args.turns))
        await measure_load(m, durable_side(driver, nc, rs, servers, procs, args), args.load_runs)
        log(f"durable floor: {m.data['load']['turns_per_s']:.0f} turns/s{rates_note(m.data)}, "
            f"single p50 {ms(m.data['single']['p50_ms'])}")


async def measure_raw_floor(m: Measured, servers: Servers, procs: list[subprocess.Popen[str]], sizes: list[int],
                            args: argparse.Namespace) -> None:
    async with connected(servers, lambda nc: FloorDriver(nc, sizes)) as (nc, rs, driver):
        await driver.run_load(args.warmup_sessions, 5)
        m.data["single"] = summary(await driver.run_sequential(args.single, args.turns))
        await measure_load(m, LoadSide(lambda: driver.run_load(args.sessions, args.turns),
                                       {**responder_pids("echo responder", procs), **servers.pids(),
                                        "bench client (driver)": os.getpid()},
                                       counter(nc, rs, servers, {}), {}), args.load_runs)
        log(f"raw floor: {m.data['load']['turns_per_s']:.0f} turns/s{rates_note(m.data)}, "
            f"single p50 {ms(m.data['single']['p50_ms'])}")


async def create_floor_streams(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        await durable_floor.ensure_streams(nc.jetstream(), len(DEFAULT_PLAN))
    finally:
        await nc.drain()
