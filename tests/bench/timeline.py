"""One tool-turn of a single session across every process of a layout, as each process
saw it: its NATS messages and script-channel calls in, out, and the CPU it spent between.

    .venv/bin/python -m tests.bench.timeline [--layout split1] [--nats-sync always]

Every process of the layout loads tests/bench/timeline_probe/sitecustomize.py. After a
warm-up, one session of 8 tool-turns runs; its fifth tool-turn (from the `message` event
the client got to the next) is printed: milliseconds from its start, the CPU the process
spent since its previous note, the process, and what it read or wrote. A hop's time is
from its message read to its next write, its CPU the column's sum in between. The notes
cost a few µs each: compare hops with each other, not with the bench's p50.

LW_BENCH_TIMELINE_WRAP=`module:Name.attr,...` (e.g. `loopwire.router.shell.service:decide`,
where the router calls it) notes each call of those functions, on entry and exit, in every
process that has them. tests.bench.hop_times reads the same notes over many tool-turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from .driver import warmed_up
from .layouts import System, bench_layouts, probe_output, start_servers, with_probe

PROBE = Path(__file__).parent / "timeline_probe"


async def one_turn(pids: dict[str, int], out: str, nats_url: str, redis_url: str) -> None:
    driver = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    await asyncio.sleep(0.3)
    run, _ = await driver.run_one("timeline", 8)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    rows: list[tuple[float, float, str, str, str]] = []
    for name, pid in pids.items():
        for line in probe_output(out, pid, ".tsv").read_text().splitlines():
            when, cpu_s, io, text = line.split("\t", 3)
            rows.append((float(when), float(cpu_s), name, io, text))
    rows.sort()
    start, end = run.messages[4], run.messages[5]
    last: dict[str, float] = {}
    first: float | None = None
    for at, cpu, name, kind, what in rows:
        spent = cpu - last.get(name, cpu)
        last[name] = cpu
        if start - 0.0005 <= at <= end + 0.0005:
            first = first if first is not None else at
            print(f"{1000 * (at - first):8.3f} ms {1000 * spent:6.3f} {name:12s} {kind:7s} {what[:90]}")
    print(f"the client got the turn's `message` events at {1000 * (start - (first or start)):.3f} and "
          f"{1000 * (end - (first or start)):.3f} ms")
    await driver.stop()
    await driver.nc.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="split1")
    parser.add_argument("--nats-sync", choices=("always", "default"), default="default")
    args = parser.parse_args()
    out = with_probe(PROBE, "LW_BENCH_TIMELINE", "lw-timeline-")
    servers = start_servers(sync_always=args.nats_sync == "always")
    system = System(servers, bench_layouts()[args.layout])
    try:
        system.start()
        pids = {label: pid for label, pid in system.pids().items() if label != "transcripts"}
        asyncio.run(one_turn(pids, out, servers.nats_url, servers.redis_url))
    finally:
        system.stop()
        servers.stop()


if __name__ == "__main__":
    main()
