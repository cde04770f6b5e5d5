"""`make bench`: loopwire's speed targets in every layout, against two floors, in one run.

    .venv/bin/python -m tests.bench.run_bench                # the issue's load (make bench)
    .venv/bin/python -m tests.bench.run_bench --quick        # a small load, for development
    .venv/bin/python -m tests.bench.run_bench --layouts workers,split --no-doc

1. A fresh nats-server (JetStream, `sync_interval: always`, a monitoring port) and
   redis-server (`appendonly yes`, `appendfsync everysec`) on free ports (layouts.py).
2. Each layout in turn (`loopwire up`, `loopwire up --workers 2`, five `loopwire serve`
   processes with one router, six with two routers), with the scripted model
   (`LOOPWIRE_LLM_PROVIDER=scripted`: its bench brain calls `noop` N times for a prompt
   `bench:N`) and the no-op tool of bench_tools.py: hop accounting (trace.py), a warm-up,
   single-session latency (sessions one at a time), then `--sessions` concurrent sessions of
   `--turns` tool-turns, `--load-runs` times, with the CPU of every process (procstat.py)
   and the servers' own counts (wire.py). After `--workers 2`: Redis bytes of sessions of
   20, 100 and 200 tool-turns.
3. The durable floor (durable_floor.py: the same hops as JetStream work-queue messages,
   events into a stream) and the raw floor (floor.py: core-NATS request/reply), each with
   the Redis calls the trace counted.
4. The consume path alone (consume_overhead.py), and what waiting for a Redis replica costs
   a write (replica_wait.py). The layout `split_redis_cluster` runs on a 3-master Redis
   Cluster of its own (its keys per master in the results); `split_redis_cluster_nowait`
   (not in the default run) is the same with LOOPWIRE_REDIS_WAIT_REPLICAS=0.
   `split_nats_r3` runs on a 3-node NATS cluster of its own with every stream on all three
   nodes (the CPU of each node, which node leads each stream), `split_clustered` on both
   clusters: what a deployment beyond one machine runs.
5. `.run/bench.json` (everything), the console table, and docs/benchmarks.md's results
   block rendered from that file (report.py; `--no-doc` leaves the doc alone).

Everything is stopped at the end, also on failure or Ctrl-C; a watchdog ends a run that
hangs. Nothing here is a test: pytest collects nothing from this folder.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import redis.asyncio as aioredis

from . import report
from .consume_overhead import measure_all
from .driver import BenchDriver, wait_for_tool
from .floor import plan_to_json
from .floor_runs import (
    create_floor_streams,
    floor_plan,
    floor_sizes,
    measure_durable_floor,
    measure_raw_floor,
    start_responders,
    stop_all,
)
from .layouts import LAYOUT_ORDER, ROOT, Servers, System, bench_layouts, start_servers
from .measuring import Measured, connected, counter, log, measure_load, summary
from .procstat import machine_facts, other_busy_processes
from .redis_bytes import session_bytes
from .replica_wait import describe as describe_replica_wait
from .replica_wait import measure_replica_wait
from .trace import TurnCost, trace_turns

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / ".run" / "bench.json"
LOOPWIRE_STREAMS = {"LOOPWIRE_WORK": "work", "LOOPWIRE_EVENTS": "events", "LOOPWIRE_INGRESS": "ingress"}
QUICK = {"sessions": 40, "turns": 10, "single": 2, "warmup_sessions": 10, "load_runs": 1, "bytes_turns": "10,20,40"}
"""--quick (or LOOPWIRE_BENCH_QUICK=1): a load small enough to iterate on, every layout still."""
T = TypeVar("T")


def run_async(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on uvloop when available (as the services do), else asyncio."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - not on Windows
        return asyncio.run(coro_fn())
    return uvloop.run(coro_fn())


async def measure_layout(m: Measured, servers: Servers, services: dict[str, int], args: argparse.Namespace,
                         extra: Callable[[BenchDriver], Awaitable[None]] | None = None) -> None:
    name = m.data["name"]
    async with connected(servers, BenchDriver) as (nc, r, driver):
        log(f"{name}: warm-up, {args.warmup_sessions} sessions × 5 tool-turns")
        warm = await driver.run_load("warm", args.warmup_sessions, 5, timeout=args.load_timeout)
        if warm.failures:
            raise RuntimeError(f"warm-up failed: {warm.failures[:3]}")
        log(f"{name}: single session, {args.single} × {args.turns} tool-turns one at a time")
        m.data["single"] = summary(await driver.run_sequential("single", args.single, args.turns))
        log(f"{name}: load, {args.sessions} concurrent sessions × {args.turns} tool-turns, {args.load_runs} run(s)")
        await measure_load(m, lambda: driver.run_load("load", args.sessions, args.turns, timeout=args.load_timeout),
                           {**services, **servers.pids(), "bench client": os.getpid()}, args.load_runs,
                           counter(nc, r, servers, LOOPWIRE_STREAMS), LOOPWIRE_STREAMS)
        log(f"{name}: {m.data['load']['turns_per_s']:.0f} turns/s{report.rates_note(m.data)}, "
            f"single p50 {report.ms(m.data['single']['p50_ms'])}, {m.data['load']['n_failures']} failed sessions")
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
            "lua_cmds": trace.lua_cmds, "timeline": trace.timeline}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", default=os.environ.get("LOOPWIRE_BENCH_QUICK") == "1",
                   help=f"a small load for development ({QUICK}); also LOOPWIRE_BENCH_QUICK=1")
    p.add_argument("--sessions", type=int, help="concurrent sessions under load (200)")
    p.add_argument("--turns", type=int, help="tool-turns per session (20)")
    p.add_argument("--single", type=int, help="sessions run one at a time for the latency (5)")
    p.add_argument("--warmup-sessions", type=int, help="(40)")
    p.add_argument("--load-runs", type=int, help="runs of the load per layout; the median by turns/s is kept (3)")
    p.add_argument("--bytes-turns", help="tool-turns of the Redis-bytes sessions (20,100,200); '' for none")
    p.add_argument("--load-timeout", type=float, default=300.0)
    p.add_argument("--workers", type=int, default=2, help="`loopwire up --workers N` (2: the target's machine)")
    p.add_argument("--layouts", default=",".join(LAYOUT_ORDER),
                   help=f"which loopwire layouts, comma-separated, of {', '.join(bench_layouts())}")
    p.add_argument("--no-floors", action="store_true", help="skip both floors (the targets need the durable one)")
    p.add_argument("--floor-responders", type=int, default=2,
                   help="processes of the durable floor's responder (2: as `up --workers 2`)")
    p.add_argument("--nats-sync", choices=("always", "default"), default="always",
                   help="JetStream's sync_interval: always (compose and Helm) or nats-server's default, "
                        "to see what the fsync per stored message costs (then pass --no-doc)")
    p.add_argument("--no-doc", action="store_true", help="leave docs/benchmarks.md alone (the results file is "
                                                         "written anyway)")
    p.add_argument("--results", default=str(RESULTS), help="the results file (JSON)")
    p.add_argument("--watchdog", type=int, default=2400, help="seconds before a hung run is ended")
    args = p.parse_args(argv)
    full = {"sessions": 200, "turns": 20, "single": 5, "warmup_sessions": 40, "load_runs": 3,
            "bytes_turns": "20,100,200"}
    for key, value in (QUICK if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.layout_keys = [k.strip() for k in args.layouts.split(",") if k.strip()]
    unknown = [k for k in args.layout_keys if k not in bench_layouts()]
    if unknown:
        p.error(f"unknown layout(s) {unknown}; choose from {', '.join(bench_layouts())}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.monotonic()
    given = sys.argv[1:] if argv is None else argv
    res: dict[str, Any] = {
        "version": 2, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_facts(),
        "command": "make bench" + (f" ({' '.join(given)})" if given else ""),
        "params": {"sessions": args.sessions, "turns": args.turns, "single": args.single,
                   "warmup": args.warmup_sessions, "load_runs": args.load_runs, "quick": args.quick,
                   "workers": args.workers, "floor_responders": args.floor_responders},
        "layouts": {}, "order": [], "bytes": {}, "notes": [], "consume_us": {}}

    def watchdog(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"the bench ran longer than {args.watchdog}s")

    signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(args.watchdog)
    servers = start_servers(sync_always=args.nats_sync == "always")
    log(f"nats-server {servers.nats_url} (monitor {servers.monitor_url}), redis-server {servers.redis.url}")
    res["servers"] = run_async(lambda: server_settings(servers))
    busy = other_busy_processes({os.getpid(), *servers.pids().values()}, min_share=0.2)
    if busy:
        res["notes"].append("busy processes on the machine at the start: " + "; ".join(busy[:5]))
        log(f"warning: {res['notes'][-1]}")
    system: System | None = None
    cluster_of_layout: Servers | None = None
    responders: list[subprocess.Popen[str]] = []
    traces: dict[str, TurnCost] = {}
    failed = False
    specs = bench_layouts(args.workers)
    bytes_sizes = [int(x) for x in args.bytes_turns.split(",") if x.strip()]
    bytes_in = "workers" if "workers" in args.layout_keys else args.layout_keys[0] if args.layout_keys else None
    try:
        for key in args.layout_keys:
            spec = specs[key]
            m = Measured(key, spec.name, "loopwire", spec)
            log(f"starting {spec.name}: {', '.join(spec.commands)}")
            on = servers.with_redis_cluster(spec.redis_masters) if spec.redis_masters else servers
            if spec.nats_nodes:
                on = on.with_nats_cluster(spec.nats_nodes, sync_always=args.nats_sync == "always")
                log(f"{spec.name}: NATS cluster {on.nats_url}")
            cluster_of_layout = on if spec.redis_masters or spec.nats_nodes else None  # stopped after it, or below
            t0 = time.monotonic()
            system = System(on, spec)
            system.start()
            run_async(lambda: wait_for_tool(on.redis_url, "noop", cluster=bool(spec.redis_masters)))  # noqa: B023
            m.data["start_s"] = time.monotonic() - t0
            if not spec.redis_masters:  # MONITOR sees one server: the trace is the one-Redis layouts'
                log(f"{spec.name}: counting the hops of one tool-turn")
                traces[key] = run_async(lambda: trace_turns(on.nats_url, servers.redis.url))  # noqa: B023
                m.data["trace"] = trace_dict(traces[key])

            async def bytes_after(driver: BenchDriver) -> None:
                await measure_bytes(driver, servers.redis.url, bytes_sizes, res)

            pids, extra = system.pids(), bytes_after if key == bytes_in and bytes_sizes else None
            run_async(lambda: measure_layout(m, on, pids, args, extra))  # noqa: B023 - run at once
            if on.redis_cluster is not None:
                m.data["redis_keys_per_master"] = on.redis_cluster.keys_per_master()
                log(f"{spec.name}: keys per master {m.data['redis_keys_per_master']}")
            if on.nats_cluster is not None:
                m.data["stream_leaders"] = on.stream_leaders()
                log(f"{spec.name}: stream leaders {m.data['stream_leaders']}")
            res["layouts"][key], res["order"] = m.data, [*res["order"], key]
            system.stop()
            system = None
            if cluster_of_layout is not None:
                cluster_of_layout.stop_redis_cluster()
                cluster_of_layout.stop_nats_cluster()
                cluster_of_layout = None
        if not args.no_floors:
            plan_key = next((k for k in ("split", "split1", "workers", "up") if k in traces), None)
            trace = traces.get(plan_key) if plan_key else None
            plan, sizes = floor_plan(trace), floor_sizes(trace)
            res["floor_plan"] = [(h.service, list(h.redis), list(h.events)) for h in plan]
            res["floor_plan_from"] = specs[plan_key].name if plan_key else "the design (no trace)"
            res["floor_sizes"] = sizes
            log(f"floors: envelopes of {sizes} bytes, Redis per hop {[len(h.redis) for h in plan]}")
            # -- the durable floor ---------------------------------------------------------
            run_async(lambda: create_floor_streams(servers.nats.url))
            responders = start_responders("tests.bench.durable_floor", args.floor_responders, servers,
                                          ["--sizes", ",".join(map(str, sizes)), "--plan", plan_to_json(plan)])
            m = Measured("floor_durable", "durable floor", "floor")
            m.data["processes"] = args.floor_responders
            run_async(lambda: measure_durable_floor(m, servers, responders, sizes, args))
            res["layouts"]["floor_durable"], res["order"] = m.data, [*res["order"], "floor_durable"]
            stop_all(responders)
            # -- the raw floor -------------------------------------------------------------
            responders = start_responders("tests.bench.floor", 1, servers,
                                          ["--reply-sizes", ",".join(map(str, sizes[1:] + sizes[:1])),
                                           "--plan", plan_to_json(plan)])
            m = Measured("floor_raw", "raw floor", "floor")
            m.data["processes"] = 1
            run_async(lambda: measure_raw_floor(m, servers, responders, sizes, args))
            res["layouts"]["floor_raw"], res["order"] = m.data, [*res["order"], "floor_raw"]
            stop_all(responders)
            responders = []
        log("consume path: CPU per message received, by handler style")
        res["consume_us"] = run_async(lambda: measure_all(servers.nats.url))
        log("replica wait: an event append without WAIT and with WAIT 1 (a master and its replica)")
        res["replica_wait"] = run_async(measure_replica_wait)
        log(describe_replica_wait(res["replica_wait"]))
    except BaseException:
        failed = True
        raise
    finally:
        signal.alarm(0)
        if system is not None:
            for path in system.stop(keep_logs=failed):
                log(f"kept log {path}")
        stop_all(responders)
        if cluster_of_layout is not None:
            cluster_of_layout.stop_redis_cluster()
            cluster_of_layout.stop_nats_cluster()
        servers.stop()
        res["duration_s"] = time.monotonic() - t_start
        if failed:
            partial = Path(args.results).with_suffix(".partial.json")
            partial.parent.mkdir(exist_ok=True)
            partial.write_text(json.dumps(res, indent=1))
            log(f"failed; what was measured is in {partial}")

    failures = 0
    for _key, lay in report.layouts(res):
        share = lay.get("other_share", 0)
        if share > 0.1:
            res["notes"].append(f"{lay['name']}: the machine was not idle — other processes used "
                                f"{100 * share:.0f}% of a core during the load run; every number of it is pessimistic")
        for run in ("single", "load"):
            if lay.get(run) and lay[run]["n_failures"]:
                failures += lay[run]["n_failures"]
                res["notes"].append(f"{lay['name']}: {lay[run]['n_failures']} {run} sessions failed, "
                                    f"e.g. {lay[run]['failures'][0]}")
    res["duration_s"] = time.monotonic() - t_start
    out = Path(args.results)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print()
    print(report.console_table(res))
    log(f"wrote {out}")
    if not args.no_doc:
        report.write_doc(DOC, res)
        log(f"wrote the results block of {DOC.relative_to(ROOT)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
