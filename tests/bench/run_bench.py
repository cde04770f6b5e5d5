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
   20, 100 and 200 tool-turns. In the split layout: RSS and idle CPU of every process after
   start and after the load, and each service's time from exec to its first work (lean.py),
   and forks of a session of 1,000 events through its routers (fork_cost.py; else in the
   first layout on one Redis).
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
5. A second pass on fresh servers with nats-server's default `sync_interval`: the layouts
   with targets and the durable floor again (`--no-default-sync` skips it).
6. The provider-bound pass on fresh servers (provider_bound.py): the split layout against
   the fake Messages API with a 5 s model and a 0.5 s tool, 1,000 sessions × 5 tool-turns,
   then 200 under model limits (`--no-provider-bound` skips it).
7. The cost pass on fresh servers (cost_pass.py): one 20-tool-turn session against the
   fake's prompt cache, cached, uncached and compacting.
8. `.run/bench.json` (everything), the console table with every target of targets.py
   `[MET ]` or `[MISS]`, and docs/bench-results.md's results block (every table) and docs/benchmarks.md's summary (the targets) rendered from that file
   (report.py; `--no-doc` leaves the doc alone).

Everything is stopped at the end, also on failure or Ctrl-C; a watchdog ends a run that
hangs. Nothing here is a test: pytest collects nothing from this folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import report
from .console import console_table
from .consume_overhead import measure_all
from .cost_pass import measure_cost
from .layouts import LAYOUT_ORDER, ROOT, bench_layouts, start_servers
from .measuring import log
from .passes import Pass, run_async, start_pass
from .procstat import machine_facts, other_busy_processes
from .provider_bound import measure_provider_bound
from .provider_bound import summary_lines as provider_summary
from .replica_wait import describe as describe_replica_wait
from .replica_wait import measure_replica_wait
from .targets import TARGETS

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS_DOC = ROOT / "docs" / "bench-results.md"
RESULTS = ROOT / ".run" / "bench.json"
QUICK = {"sessions": 40, "turns": 10, "single": 4, "warmup_sessions": 10, "load_runs": 1, "bytes_turns": "10,20,40",
         "provider_sessions": 100, "limited_sessions": 60}
"""--quick (or LOOPWIRE_BENCH_QUICK=1): a load small enough to iterate on, every layout still."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", default=os.environ.get("LOOPWIRE_BENCH_QUICK") == "1",
                   help=f"a small load for development ({QUICK}); also LOOPWIRE_BENCH_QUICK=1")
    p.add_argument("--sessions", type=int, help="concurrent sessions under load (200)")
    p.add_argument("--turns", type=int, help="tool-turns per session (20)")
    p.add_argument("--single", type=int, help="sessions run one at a time for the latency (20)")
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
    p.add_argument("--no-default-sync", action="store_true",
                   help="skip the second pass with nats-server's default sync_interval (workers, split1, split and "
                        "the durable floor again)")
    p.add_argument("--no-doc", action="store_true", help="leave docs/benchmarks.md and docs/bench-results.md alone (the results file is "
                                                         "written anyway)")
    p.add_argument("--no-provider-bound", action="store_true",
                   help="skip the provider-bound pass (a 5 s model: provider_bound.py)")
    p.add_argument("--provider-sessions", type=int, help="sessions of the provider-bound pass (1000)")
    p.add_argument("--limited-sessions", type=int, help="sessions of its run under model limits (200)")
    p.add_argument("--results", default=str(RESULTS), help="the results file (JSON)")
    p.add_argument("--watchdog", type=int, default=2400, help="seconds before a hung run is ended")
    args = p.parse_args(argv)
    full = {"sessions": 200, "turns": 20, "single": 20, "warmup_sessions": 40, "load_runs": 3,
            "bytes_turns": "20,100,200", "provider_sessions": 1000, "limited_sessions": 200}
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
        "version": 3, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_facts(),
        "command": "make bench" + (f" ({' '.join(given)})" if given else ""),
        "params": {"sessions": args.sessions, "turns": args.turns, "single": args.single,
                   "warmup": args.warmup_sessions, "load_runs": args.load_runs, "quick": args.quick,
                   "workers": args.workers, "floor_responders": args.floor_responders},
        "layouts": {}, "order": [], "bytes": {}, "notes": [], "consume_us": {}}

    def watchdog(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"the bench ran longer than {args.watchdog}s")

    signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(args.watchdog)
    run: Pass | None = start_pass(args.nats_sync == "always", res)
    assert run is not None
    busy = other_busy_processes({os.getpid(), *run.servers.pids().values()}, min_share=0.2)
    if busy:
        res["notes"].append("busy processes on the machine at the start: " + "; ".join(busy[:5]))
        log(f"warning: {res['notes'][-1]}")
    failed = False
    bytes_sizes = [int(x) for x in args.bytes_turns.split(",") if x.strip()]
    keys = args.layout_keys
    bytes_in = "workers" if "workers" in keys else keys[0] if keys else None
    lean_in = next((k for k in ("split", "split1") if k in keys), None)
    specs = bench_layouts(args.workers)
    one_redis = [k for k in keys if not specs[k].redis_masters and not specs[k].nats_nodes]
    fork_in = "split" if "split" in one_redis else one_redis[0] if one_redis else None
    second_keys = [k for k in keys if k in TARGETS]
    try:
        run.layouts(args, keys, trace=True, lean_in=lean_in, bytes_in=bytes_in, bytes_sizes=bytes_sizes,
                    fork_in=fork_in)
        if not args.no_floors:
            run.floors(args, run.traces, raw=True)
        log("consume path: CPU per message received, by handler style")
        res["consume_us"] = run_async(lambda: measure_all(run.servers.nats.url))  # type: ignore[union-attr]
        log("replica wait: an event append without WAIT and with WAIT 1 (a master and its replica)")
        res["replica_wait"] = run_async(measure_replica_wait)
        log(describe_replica_wait(res["replica_wait"]))
        traces = run.traces
        run.stop(failed=False)
        run = None
        log("-- the cost pass: prompt caching, on fresh servers")
        servers = start_servers(sync_always=args.nats_sync == "always")
        try:
            res["cost"] = measure_cost(servers)
        finally:
            servers.stop()
        if not args.no_provider_bound:
            log("-- the provider-bound pass: a 5 s model, on fresh servers")
            servers = start_servers(sync_always=args.nats_sync == "always")
            try:
                res["provider_bound"] = measure_provider_bound(servers, args.provider_sessions, 5,
                                                               args.limited_sessions)
            finally:
                servers.stop()
            for line in provider_summary(res["provider_bound"]):
                log(line)
        if args.nats_sync == "always" and not args.no_default_sync and second_keys:
            log("-- the same with nats-server's default sync_interval")
            second: dict[str, Any] = {"layouts": {}, "order": [], "notes": []}
            res["default_sync"] = second
            run = start_pass(False, second)
            run.layouts(args, second_keys, trace=False, plan_traces=traces)
            if not args.no_floors:
                run.floors(args, traces, raw=False)
            run.stop(failed=False)
            run = None
    except BaseException:
        failed = True
        raise
    finally:
        signal.alarm(0)
        if run is not None:
            run.stop(failed)
        res["duration_s"] = time.monotonic() - t_start
        if failed:
            partial = Path(args.results).with_suffix(".partial.json")
            partial.parent.mkdir(exist_ok=True)
            partial.write_text(json.dumps(res, indent=1))
            log(f"failed; what was measured is in {partial}")

    failures = 0
    for results in (res, res.get("default_sync") or {"layouts": {}, "order": []}):
        for _key, lay in report.layouts(results):
            share = lay.get("other_share", 0)
            if share > 0.1:
                res["notes"].append(f"{lay['name']}: the machine was not idle — other processes used "
                                    f"{100 * share:.0f}% of a core during the load run; every number of it is "
                                    "pessimistic")
            for which in ("single", "load"):
                if lay.get(which) and lay[which]["n_failures"]:
                    failures += lay[which]["n_failures"]
                    res["notes"].append(f"{lay['name']}: {lay[which]['n_failures']} {which} sessions failed, "
                                        f"e.g. {lay[which]['failures'][0]}")
    res["duration_s"] = time.monotonic() - t_start
    out = Path(args.results)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print()
    print(console_table(res))
    log(f"wrote {out}")
    if not args.no_doc:
        report.write_doc(RESULTS_DOC, res)
        report.write_summary(DOC, res)
        log(f"wrote the results block of {RESULTS_DOC.relative_to(ROOT)} and the summary of {DOC.relative_to(ROOT)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
