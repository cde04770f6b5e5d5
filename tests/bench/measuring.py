"""The bench's measuring window: one layout's (or floor's) results as the results file
holds them, and a load run taken several times, each inside its own CPU and wire window
(procstat.py, wire.py), the median kept."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import nats
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from . import wire
from .driver import LoadResult
from .layouts import BenchLayout, Servers
from .procstat import CpuWindow


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)


def summary(run: LoadResult | None) -> dict[str, Any] | None:
    if run is None:
        return None
    lat = sorted(run.latencies_s)

    def q(f: float) -> float | None:
        if not lat:
            return None
        return 1000 * lat[min(len(lat) - 1, int(round(f * (len(lat) - 1))))]

    return {"sessions": run.sessions, "turns": run.turns_per_session, "wall_s": run.wall_s,
            "turns_per_s": run.turns_per_s, "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99),
            "n_latencies": len(lat), "n_failures": len(run.failures), "failures": run.failures[:5]}


class Measured:
    """What one layout (or floor) measured, as the results file holds it."""

    def __init__(self, key: str, name: str, kind: str, layout: BenchLayout | None = None) -> None:
        self.data: dict[str, Any] = {"name": name, "kind": kind}
        if layout is not None:
            self.data.update(commands=list(layout.commands),
                             targets=layout.targets.as_dict() if layout.targets else {})
        self.key = key


LoadRun = tuple[LoadResult, dict[str, float], float, dict[str, Any]]
"""One load run: its result, the CPU of each process and of the machine's others in its
window, and its wire counts per tool-turn."""


@dataclass
class LoadSide:
    """What one system's load run needs: the run, the processes whose CPU it counts, and
    the wire counters of its streams."""

    run: Callable[[], Awaitable[LoadResult]]
    pids: dict[str, int]
    counts: Callable[[], Awaitable[wire.Snapshot]]
    streams: dict[str, str]

    async def once(self) -> LoadRun:
        before = await self.counts()
        window = CpuWindow(self.pids).start()
        load = await self.run()
        spent = window.stop()
        after = await self.counts()
        return load, spent, window.others, wire.per_turn(before, after, load.tool_turns, self.streams)


def keep_median(data: dict[str, Any], done: list[LoadRun]) -> None:
    """Of several load runs, the median by turns/s (this machine's speed drifts from one run
    to the next), or the first with failed sessions, so a failure is never hidden."""
    data["load_rates"] = [load.turns_per_s for load, *_ in done]
    failing = [d for d in done if d[0].failures]
    load, spent, others, counted = failing[0] if failing else sorted(done, key=lambda d: d[0].turns_per_s)[len(done) // 2]
    turns, wall = load.tool_turns, load.wall_s
    data.update(load=summary(load), wire=counted,
                cpu_ms={k: 1000 * v / turns for k, v in spent.items()},
                cpu_share={k: v / wall for k, v in spent.items()},
                other_ms=1000 * others / turns, other_share=others / wall)


async def measure_load(m: Measured, side: LoadSide, runs: int, floor: LoadSide | None = None) -> None:
    """The load `runs` times, each in its own CPU and wire window, the median kept. With
    `floor`, the durable floor's load runs take turns with these (one of each, `runs`
    times) and are kept as the layout's `floor_alongside`: two systems measured minutes
    apart compare this machine's drift as much as themselves."""
    mine: list[LoadRun] = []
    floors: list[LoadRun] = []
    for _ in range(max(1, runs)):
        mine.append(await side.once())
        if floor is not None:
            floors.append(await floor.once())
    keep_median(m.data, mine)
    if floors:
        keep_median(m.data.setdefault("floor_alongside", {}), floors)


def counter(nc: NatsClient, rs: list[aioredis.Redis], servers: Servers,
            streams: dict[str, str]) -> Callable[[], Awaitable[wire.Snapshot]]:
    async def snap() -> wire.Snapshot:
        return await wire.snapshot(nc, rs, servers.monitor_urls(), tuple(streams))
    return snap


class Driver(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


D = TypeVar("D", bound=Driver)


@contextlib.asynccontextmanager
async def connected(servers: Servers, make_driver: Callable[[NatsClient], D]) -> AsyncIterator[
        tuple[NatsClient, list[aioredis.Redis], D]]:
    """A NATS connection and one to each Redis the layout runs on (the bench's, or every
    master of its cluster) and a started load driver on the NATS one, for one layout's
    (or floor's) measurement; all closed after it."""
    nc = await nats.connect(servers=servers.nats_urls)
    rs = [aioredis.Redis.from_url(url) for url in servers.redis_master_urls()]
    driver = make_driver(nc)
    await driver.start()
    try:
        yield nc, rs, driver
    finally:
        await driver.stop()
        for r in rs:
            await r.aclose()
        await nc.drain()
