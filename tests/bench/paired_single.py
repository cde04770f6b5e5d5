"""A layout's single-session latency against the durable floor's, their sessions taking
turns, in rounds: the A/B of a change to the single-session path.

    .venv/bin/python -m tests.bench.paired_single [--layout split1] [--rounds 3] [--sessions 40] [--nats-sync always]

`make bench` judges each layout's p50 against the floor's sessions that took turns with
its own (passes.py); this runs only that, longer: the layout and the floor's two
responders on fresh servers (nats-server's default sync unless told), the floor's plan
from the layout's trace, a warm-up of each, then `--rounds` rounds of `--sessions` sessions
of each × 20 tool-turns, one of each in turn (driver.alternated). Each round prints both
p50s and their ratio; the rounds' spread is the noise to beat (about ±5% here).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import nats

from . import durable_floor
from .driver import alternated, warmed_up
from .floor_runs import beside_the_floor


async def rounds(nats_url: str, redis_url: str, sizes: list[int], count: int, sessions: int) -> list[float]:
    """The ratio of each round (the layout's p50 over the floor's)."""
    layout = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    floor = durable_floor.DurableFloorDriver(await nats.connect(nats_url), sizes)
    await floor.start()
    await floor.run_load("warm", 40, 5)
    ratios = []
    for n in range(count):
        mine, floors = await alternated(layout, floor, sessions, 20)
        a, f = statistics.median(mine.latencies_s), statistics.median(floors.latencies_s)
        ratios.append(a / f)
        print(f"round {n}: layout p50 {1000 * a:.2f} ms, floor p50 {1000 * f:.2f} ms, {a / f:.3f}×", flush=True)
    for driver in (layout, floor):
        await driver.stop()
        await driver.nc.drain()
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="split1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--nats-sync", choices=("always", "default"), default="default")
    args = parser.parse_args()
    with beside_the_floor(args.layout, sync_always=args.nats_sync == "always") as (servers, _, sizes, _):
        ratios = asyncio.run(rounds(servers.nats_url, servers.redis_url, sizes, args.rounds, args.sessions))
        print(f"{args.layout}: median {statistics.median(ratios):.3f}× the floor over {len(ratios)} rounds")

if __name__ == "__main__":
    main()
