"""What Python's cyclic garbage collector costs a `loopwire up` process under the bench's load,
for each of several thresholds (LOOPWIRE_GC_THRESHOLDS; shared/runtime/gc_tuning.py).

    .venv/bin/python -m tests.bench.gc_cost [--thresholds 20000,20,20 100000,20,20 0] [--sessions 200]

For each setting: fresh servers (nats-server's default sync, as the CPU-bound pass), one
`loopwire up` process started through this module (`--serve`), which times every collection
with `gc.callbacks` (the thread's CPU between its start and its stop); a warm-up, then 200
sessions × 20 tool-turns. SIGUSR2 starts the count, SIGUSR1 writes it out. Printed: the
collections by generation, their CPU, the objects they freed, and the process's own CPU per
tool-turn over the same load. `0` turns automatic collection off: the floor of the others.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .driver import warmed_up
from .layouts import ROOT, service_env, start_servers


def serve(out: str) -> None:
    """`loopwire up` in this process, its collections timed (run by `main` as a child)."""
    counts: dict[str, Any] = {}
    counting = False
    started = 0.0

    def reset() -> None:
        counts.update(collections=[0, 0, 0], cpu_s=[0.0, 0.0, 0.0], collected=0, process_cpu_s=time.process_time())

    def timed(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.thread_time()
        elif counting:
            generation = info["generation"]
            counts["collections"][generation] += 1
            counts["cpu_s"][generation] += time.thread_time() - started
            counts["collected"] += info["collected"]

    def start(*_: Any) -> None:
        nonlocal counting
        reset()
        counting = True

    def write(*_: Any) -> None:
        nonlocal counting
        counting = False
        counts["process_cpu_s"] = time.process_time() - counts["process_cpu_s"]
        counts["threshold"] = gc.get_threshold()
        Path(out + ".part").write_text(json.dumps(counts))
        os.replace(out + ".part", out)  # whole when the parent sees it

    gc.callbacks.append(timed)
    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, write)
    sys.argv = ["loopwire", "up"]
    runpy.run_module("loopwire.cli", run_name="__main__")


def measure(thresholds: str, sessions: int, turns: int) -> dict[str, Any]:
    servers = start_servers(sync_always=False)
    out = Path(tempfile.mkdtemp(prefix="lw-gc-")) / "counts.json"
    env = {**os.environ, **service_env(), "LOOPWIRE_NATS_URL": servers.nats_url,
           "LOOPWIRE_REDIS_URL": servers.redis_url, "LOOPWIRE_GC_THRESHOLDS": thresholds}
    proc = subprocess.Popen([sys.executable, "-m", "tests.bench.gc_cost", "--serve", str(out)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    try:
        failures = asyncio.run(drive(proc, servers.nats_url, servers.redis_url, sessions, turns))
        for _ in range(100):  # the child writes its counts on SIGUSR1
            if out.exists():
                break
            time.sleep(0.1)
        counts: dict[str, Any] = json.loads(out.read_text())
        counts.update(turns=sessions * turns, failures=failures)
        return counts
    finally:
        proc.terminate()
        proc.wait(30)
        servers.stop()


async def drive(proc: subprocess.Popen[bytes], nats_url: str, redis_url: str, sessions: int, turns: int) -> int:
    """The warm-up, then the counted load; its failed sessions."""
    driver = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    proc.send_signal(signal.SIGUSR2)
    await asyncio.sleep(0.2)
    load = await driver.run_load("load", sessions, turns)
    proc.send_signal(signal.SIGUSR1)
    await driver.nc.close()
    return len(load.failures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--thresholds", nargs="+", default=["20000,20,20", "100000,20,20", "0"])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    for thresholds in args.thresholds:
        c = measure(thresholds, args.sessions, args.turns)
        gc_s = sum(c["cpu_s"])
        print(f"thresholds {thresholds:>14}: collections by generation {c['collections']}, "
              f"{gc_s:.2f} s of CPU ({100 * gc_s / c['process_cpu_s']:.1f}% of the process's {c['process_cpu_s']:.2f} s), "
              f"{c['collected']} objects freed; the process {1000 * c['process_cpu_s'] / c['turns']:.2f} ms of CPU "
              f"per tool-turn ({c['turns']} tool-turns, {c['failures']} failed sessions)", flush=True)


if __name__ == "__main__":
    main()
