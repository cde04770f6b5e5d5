"""How many Python calls one tool-turn makes in each process of a layout, counted by cProfile.

    .venv/bin/python -m tests.bench.call_count [--layout workers] [--sessions 200 --turns 20] [--top 25]

CPU time varies by a tenth from run to run on a shared machine; the calls a tool-turn makes
do not, so they show what a change removed. Every process of the layout (fresh servers,
nats-server's default sync) loads tests/bench/call_probe/sitecustomize.py; after the
warm-up each is profiled through one load, and for each: the calls per tool-turn of the
tool-turns it took part in (in `up --workers N` each worker takes its share: the load's
tool-turns divided by N), builtins apart, and the functions called most. cProfile counts
each resumption of a coroutine as a call, and slows the process: read the counts, not its
times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
from pathlib import Path

from .driver import warmed_up
from .layouts import System, bench_layouts, probe_output, start_servers, with_probe

PROBE = Path(__file__).parent / "call_probe"


async def profiled_load(pids: dict[str, int], nats_url: str, redis_url: str, sessions: int, turns: int) -> None:
    driver = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    await asyncio.sleep(0.2)
    await driver.run_load("calls", sessions, turns)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    await driver.nc.close()


def report(label: str, path: Path, tool_turns: float, top: int) -> None:
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    builtin = sum(calls for (file, _, _), (_, calls, *_) in stats.items() if file == "~")
    total = sum(calls for _, calls, *_ in stats.values())
    print(f"{label}: {total / tool_turns:,.0f} calls per tool-turn ({builtin / tool_turns:,.0f} of them builtins)")
    ranked = sorted(((calls, where) for where, (_, calls, *_) in stats.items() if where[0] != "~"), reverse=True)
    for calls, (file, line, name) in ranked[:top]:
        short = file.split("site-packages/")[-1].removeprefix(str(Path.cwd()) + "/")
        print(f"  {calls / tool_turns:7.2f}  {name} ({short}:{line})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="workers")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    out = with_probe(PROBE, "LW_BENCH_CALL_PROBE", "lw-calls-")  # read by the probe in each process
    servers = start_servers(sync_always=False)
    layout = bench_layouts()[args.layout]
    system = System(servers, layout)
    system.start()
    try:
        pids = {label: pid for label, pid in system.pids().items() if label != "transcripts"}
        asyncio.run(profiled_load(pids, servers.nats_url, servers.redis_url, args.sessions, args.turns))
        share = len(pids) if args.layout == "workers" else 1
        for label, pid in pids.items():
            report(label, probe_output(out, pid, ".prof"), args.sessions * args.turns / share, args.top)
    finally:
        system.stop()
        servers.stop()


if __name__ == "__main__":
    main()
