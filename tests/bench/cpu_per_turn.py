"""Loopwire's CPU per tool-turn in one layout, over several loads on one start: for an A/B
of a change, run alternately on the code before and after it.

    .venv/bin/python -m tests.bench.cpu_per_turn [--layout workers] [--loads 7] [--label after]

`run_bench` compares a layout with the floors once per run; two runs of the same code on a
shared machine differ by a tenth. Here the layout starts once on fresh servers
(nats-server's default sync unless `--nats-sync always`), warms up, and takes `--loads` loads of 200 sessions × 20
tool-turns; each load's CPU of the loopwire processes (from /proc, all of them together)
per tool-turn and its turns/s are printed, with their medians. A change is measured by
running this on each side of it in turn, two or three times each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from .driver import warmed_up
from .layouts import System, bench_layouts, start_servers
from .procstat import cpu_seconds


async def loads(pids: dict[str, int], nats_url: str, redis_url: str, count: int, sessions: int,
                turns: int) -> list[tuple[float, float]]:
    """(ms of loopwire CPU per tool-turn, turns/s) of each load."""
    driver = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    out = []
    for n in range(count):
        before = sum(cpu_seconds(pid) for pid in pids.values())
        started = time.monotonic()
        await driver.run_load(f"cpu{n}", sessions, turns)
        wall = time.monotonic() - started
        spent = sum(cpu_seconds(pid) for pid in pids.values()) - before
        out.append((1000 * spent / (sessions * turns), sessions * turns / wall))
    await driver.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="workers")
    parser.add_argument("--loads", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--label", default="")
    parser.add_argument("--nats-sync", choices=("always", "default"), default="default",
                        help="nats-server's sync_interval (always: an fsync per stored message, as make bench's first pass)")
    args = parser.parse_args()
    servers = start_servers(sync_always=args.nats_sync == "always")
    system = System(servers, bench_layouts()[args.layout])
    system.start()
    try:
        runs = asyncio.run(loads(system.pids(), servers.nats_url, servers.redis_url, args.loads, args.sessions,
                                 args.turns))
    finally:
        system.stop()
        servers.stop()
    cpu = [c for c, _ in runs]
    print(f"{args.label or args.layout}: loopwire CPU per tool-turn median {statistics.median(cpu):.3f} ms "
          f"(each load: {' '.join(f'{c:.2f}' for c in cpu)}), turns/s median "
          f"{statistics.median(r for _, r in runs):.0f}")


if __name__ == "__main__":
    main()
