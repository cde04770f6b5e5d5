"""What waiting for a replica costs a write (shared/stores/replication.py): the event-log
append, the commonest of the writes a failover must not lose, against a master with one
replica on loopback, without WAIT and with `WAIT 1`.

    .venv/bin/python -m tests.bench.replica_wait

For each: the p50 and p99 of one append at a time, appends per second with 50 at once,
and the CPU per append of the client (this process) and of the master (INFO's
used_cpu_*). `make bench` runs it after the layouts (run_bench.py) and keeps it in the
results file as `replica_wait`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.replication import Replication
from loopwire.testing.redis_cluster import start_redis_sentinel

SEQUENTIAL = 2000
CONCURRENT = 50
EACH = 200


async def _master_cpu(r: Any) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def _measure(url: str, replicas: int) -> dict[str, float]:
    r = connect_redis(url)
    events = RedisEventLog(r, replication=Replication(r, replicas=replicas, timeout_ms=1000))
    body = {"v": 1, "kind": "message", "run_id": "r", "text": "x" * 200}
    try:
        for n in range(200):  # warm: connections, the scripts loaded
            await events.append("warm", body, f"w{n}")
        lat = []
        for n in range(SEQUENTIAL):
            t0 = time.perf_counter()
            await events.append(f"seq{replicas}", body, f"k{n}")
            lat.append(time.perf_counter() - t0)

        async def one_session(i: int) -> None:
            for n in range(EACH):
                await events.append(f"c{replicas}-{i}", body, f"k{n}")

        cpu0, master0, t0 = time.process_time(), await _master_cpu(r), time.perf_counter()
        await asyncio.gather(*(one_session(i) for i in range(CONCURRENT)))
        wall, cpu, master = time.perf_counter() - t0, time.process_time() - cpu0, await _master_cpu(r) - master0
        writes = CONCURRENT * EACH
        lat.sort()
        return {"p50_us": 1e6 * statistics.median(lat), "p99_us": 1e6 * lat[int(0.99 * len(lat))],
                "per_s": writes / wall, "client_cpu_us": 1e6 * cpu / writes, "master_cpu_us": 1e6 * master / writes}
    finally:
        await r.aclose()


async def measure_replica_wait() -> dict[str, dict[str, float]]:
    """{"no_wait": {...}, "wait_1": {...}} for a master with one replica."""
    with start_redis_sentinel(replicas=1, sentinels=1) as pair:
        url = pair.master().url
        return {"no_wait": await _measure(url, 0), "wait_1": await _measure(url, 1)}


def describe(result: dict[str, dict[str, float]]) -> str:
    lines = []
    for name, m in result.items():
        lines.append(f"{name:8} p50 {m['p50_us']:6.0f} us  p99 {m['p99_us']:6.0f} us  {m['per_s']:7.0f}/s at "
                     f"{CONCURRENT} at once  client {m['client_cpu_us']:4.0f} us  master {m['master_cpu_us']:4.0f} "
                     "us CPU per append")
    return "\n".join(lines)


if __name__ == "__main__":
    measured = asyncio.run(measure_replica_wait())
    print(describe(measured))
    print(json.dumps(measured, indent=1))
