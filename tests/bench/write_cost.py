"""What the split layout's socket writes to NATS cost, measured in each process rather than
sampled.

    .venv/bin/python -m tests.bench.write_cost [--layout split] [--sessions 200 --turns 20]

py-spy charges to the innermost Python frame it sees the time a process spends in C code
below it, so a sample taken while uvloop runs its own loop can land on the flusher's
`writelines` (docs/bench-notes/history.md, "Tenth pass"). Here every process of the layout (on fresh
servers with nats-server's default sync) loads tests/bench/write_probe/sitecustomize.py,
which times each of nats-py's `TcpTransport.writelines` calls with the thread's CPU; a
warm-up, then the load, and for each process: writes per tool-turn, their CPU per tool-turn
and each, bytes each, and that CPU's share of the process's own. `/proc/<pid>/io` gives the
write and read system calls of every kind (NATS and Redis) per tool-turn beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path

from .driver import warmed_up
from .layouts import System, bench_layouts, probe_output, start_servers, with_probe

PROBE = Path(__file__).parent / "write_probe"


def io_counts(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/io") as f:
        return {key: int(value) for key, value in (line.split(":") for line in f)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="split")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    out = with_probe(PROBE, "LW_BENCH_WRITE_PROBE", "lw-writes-")  # read by the probe in each process
    servers = start_servers(sync_always=False)
    system = System(servers, bench_layouts()[args.layout])
    system.start()
    try:
        pids = system.pids()
        turns = args.sessions * args.turns
        before, after = asyncio.run(load(pids, servers.nats_url, servers.redis_url, args.sessions, args.turns))
        for label, pid in pids.items():
            c = json.loads(probe_output(out, pid, ".json").read_text())
            writes = max(c["writes"], 1)
            print(f"{label:12s} NATS writes {c['writes'] / turns:5.2f} per tool-turn, "
                  f"{1e6 * c['cpu_s'] / turns:6.1f} µs of CPU per tool-turn ({1e6 * c['cpu_s'] / writes:5.1f} µs, "
                  f"{c['bytes'] / writes:6.0f} B each; {100 * c['cpu_s'] / max(c['process_cpu_s'], 1e-9):4.1f}% of the "
                  f"process's CPU); system calls per tool-turn: "
                  f"{(after[label]['syscw'] - before[label]['syscw']) / turns:5.2f} writes, "
                  f"{(after[label]['syscr'] - before[label]['syscr']) / turns:5.2f} reads", flush=True)
    finally:
        system.stop()
        servers.stop()


async def load(pids: dict[str, int], nats_url: str, redis_url: str, sessions: int,
               turns: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    driver = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    await asyncio.sleep(0.2)
    before = {label: io_counts(pid) for label, pid in pids.items()}
    await driver.run_load("load", sessions, turns)
    after = {label: io_counts(pid) for label, pid in pids.items()}
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    await driver.nc.close()
    return before, after


if __name__ == "__main__":
    main()
