"""Where each process of a layout spends its CPU below Python: the interpreter, the kernel,
pydantic-core, uvloop, orjson, hiredis ..., sampled by Linux `perf` under the bench's load.

    .venv/bin/python -m tests.bench.native_profile [--layout split] [--seconds 10] [--nats-sync always]

py-spy (tests/bench/profile.py) sees Python frames only: what a process does in C below
them (the kernel's socket calls, uvloop's loop, a C extension) is charged to whichever
Python frame it read last. `perf record -F 997 -p PID` of every loopwire process at once,
for `--seconds`, while 200 sessions × 20 tool-turns run again and again, answers what
share is the interpreter running Python code (libpython) and what share is native work,
by shared object (`perf report --sort dso`). Needs `perf` (linux-perf); nats-server's
default sync unless told, as in the bench's CPU-bound pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .driver import warmed_up
from .layouts import System, bench_layouts, start_servers
from .profile import keep_loading

SAMPLES_PER_S = "997"


def shares(data: Path) -> list[tuple[float, str]]:
    """(percent, shared object) from a perf.data file, the largest first."""
    report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio"],
                            capture_output=True, text=True, check=True).stdout
    rows = []
    for line in report.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%") and not line.startswith("#"):
            rows.append((float(parts[0].rstrip("%")), parts[1]))
    return sorted(rows, reverse=True)


async def record(pids: dict[str, int], nats_url: str, redis_url: str, seconds: int, out: Path) -> None:
    warm = await warmed_up(nats_url, redis_url, tool_timeout_s=120)
    await warm.stop()
    await warm.nc.drain()
    stop = asyncio.Event()
    load = asyncio.create_task(keep_loading(nats_url, 200, 20, stop))
    await asyncio.sleep(2)  # the load under way before the samples
    recorders = [await asyncio.create_subprocess_exec(
        "perf", "record", "-F", SAMPLES_PER_S, "-p", str(pid), "-o", str(out / f"{label}.data"), "--",
        "sleep", str(seconds), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for label, pid in pids.items()]
    for recorder in recorders:
        await recorder.wait()
    stop.set()
    await load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="split")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--nats-sync", choices=("always", "default"), default="default")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("no `perf` on this machine (apt-get install linux-perf)")
    out = Path(tempfile.mkdtemp(prefix="lw-perf-"))
    servers = start_servers(sync_always=args.nats_sync == "always")
    system = System(servers, bench_layouts()[args.layout])
    system.start()
    try:
        pids = {label.replace(" ", "_"): pid for label, pid in system.pids().items() if label != "transcripts"}
        asyncio.run(record(pids, servers.nats_url, servers.redis_url, args.seconds, out))
    finally:
        with contextlib.suppress(Exception):
            system.stop()
        servers.stop()
    for label in pids:
        top = shares(out / f"{label}.data")
        print(f"{label}: " + ", ".join(f"{name.removesuffix('.cpython-311-x86_64-linux-gnu.so')} {pct:.1f}%"
                                       for pct, name in top[:7]), flush=True)
    print(f"(the samples: {out})")


if __name__ == "__main__":
    main()
