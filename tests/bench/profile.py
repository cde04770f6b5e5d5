"""Profile every loopwire process of a layout under the bench's load, with py-spy.

    .venv/bin/pip install py-spy      # not a project dependency
    .venv/bin/python -m tests.bench.profile --layout split [--sessions 200 --turns 20] [--seconds 15] [--nats-sync default]

Starts the layout on fresh servers (as `make bench` does), starts a load of `--sessions`
concurrent sessions of `--turns` tool-turns again and again, and records each loopwire
process with `py-spy record --format raw` (collapsed stacks, Python frames, idle samples
left out) for `--seconds`, while the CPU of every process is read from /proc. For each
process it prints where its samples fall, by the innermost library frame of each stack
(asyncio, redis-py, FastStream, pydantic, loopwire's own code ...), and the functions with
the most samples of their own, and loopwire's functions with what they call; the raw stacks stay in `.run/profile/<layout>-<process>.txt`
for a flame graph. CPU per tool-turn by process is printed too, for the same window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nats

from .driver import BenchDriver, warmed_up
from .layouts import LAYOUT_ORDER, ROOT, System, bench_layouts, start_servers
from .procstat import CpuWindow

OUT = ROOT / ".run" / "profile"

LOOPWIRE_PACKAGES = frozenset({"router", "llm", "tools", "memory", "transcripts", "shared", "loopwire"})
LOW_LEVEL = frozenset({"asyncio", "uvloop", "stdlib"})


def frame_module(frame: str) -> str:
    """`StreamWriter.writelines (asyncio/streams.py:346)` -> `asyncio`; a module of our
    own -> `loopwire <package>`; a top-level stdlib module -> `stdlib`."""
    where = frame[frame.rfind(" (") + 2:].rsplit(":", 1)[0]
    if where.startswith("<"):
        return "stdlib"
    top = where.split("/", 1)[0]
    if "/" not in where:  # copy.py, uuid.py, ...: the standard library's own modules
        return "stdlib"
    if top in LOOPWIRE_PACKAGES:
        return f"loopwire {top}"
    return top.removesuffix(".py")


def owner(stack: list[str]) -> str:
    """Who a sample's time is spent for: the innermost frame that is neither asyncio, nor
    uvloop, nor the standard library (a socket write under redis-py is redis-py's); the
    event loop's own work when nothing above it is (py-spy's raw format puts the outermost
    frame first)."""
    for frame in reversed(stack):
        module = frame_module(frame)
        if module not in LOW_LEVEL:
            return module
    return "the event loop (asyncio, uvloop)"


def summarise(raw: Path, top: int = 25) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """(samples by owner, by own function, by loopwire function anywhere in the stack,
    total samples) of a py-spy raw file."""
    owners: Counter[str] = Counter()
    funcs: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack_text.split(";")
        total += count
        owners[owner(frames)] += count
        funcs[frames[-1]] += count
        for func in {frame.rsplit(":", 1)[0] + ")" for frame in frames}:
            if frame_module(func).startswith("loopwire ") and "cli.py" not in func:
                inclusive[func] += count
    return owners, Counter(dict(funcs.most_common(top))), Counter(dict(inclusive.most_common(top))), total


async def keep_loading(nats_url: str, sessions: int, turns: int, stop: asyncio.Event) -> int:
    nc = await nats.connect(servers=nats_url.split(","))
    driver = BenchDriver(nc)
    await driver.start()
    done = 0
    try:
        while not stop.is_set():
            load = await driver.run_load("profile", sessions, turns, timeout=300)
            done += load.tool_turns - sum(1 for _ in load.failures) * turns
    finally:
        await driver.stop()
        await nc.drain()
    return done


def find_py_spy() -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy not found: .venv/bin/pip install py-spy")
    return spy


def start_spies(spy: str, pids: dict[str, int], layout_key: str, seconds: float,
                rate: int) -> dict[str, subprocess.Popen[bytes]]:
    return {name: subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(rate), "--duration",
                                    str(int(seconds)), "--format", "raw", "--nonblocking",
                                    "-o", str(OUT / f"{layout_key}-{name.replace(' ', '_')}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for name, pid in pids.items()}


async def profile(spy: str, layout_key: str, sessions: int, turns: int, seconds: float, rate: int,
                  sync_always: bool = True) -> None:
    spec = bench_layouts()[layout_key]
    base = start_servers(sync_always=sync_always)
    # A layout on a NATS or Redis cluster gets one of its own (as run_bench).
    servers = base.with_redis_cluster(spec.redis_masters) if spec.redis_masters else base
    servers = servers.with_nats_cluster(spec.nats_nodes, sync_always=sync_always) if spec.nats_nodes else servers
    system = System(servers, spec)
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        system.start()
        stop = asyncio.Event()
        warm = await warmed_up(servers.nats_url, servers.redis_url, cluster=bool(spec.redis_masters))
        await warm.stop()
        await warm.nc.drain()
        loader = asyncio.create_task(keep_loading(servers.nats_url, sessions, turns, stop))
        await asyncio.sleep(3)  # the load under way
        pids = system.pids()
        window = CpuWindow({**pids, **servers.pids()}).start()
        t0 = time.monotonic()
        spies = start_spies(spy, pids, layout_key, seconds, rate)
        for proc in spies.values():
            await asyncio.to_thread(proc.wait)
        spent = window.stop()
        wall = time.monotonic() - t0
        stop.set()
        turns_done = await loader
        print(f"\n{bench_layouts()[layout_key].name}: {sessions} sessions × {turns} tool-turns in a loop; "
              f"profiled {wall:.0f} s; machine's other processes {100 * window.others / wall:.0f}% of a core")
        print("CPU % of a core during the window: " + ", ".join(f"{k} {100 * v / wall:.0f}%" for k, v in spent.items()))
        print(f"(about {turns_done} tool-turns were completed by the loads in and around the window)")
        for name in pids:
            raw = OUT / f"{layout_key}-{name.replace(' ', '_')}.txt"
            if not raw.exists():
                err = spies[name].stderr.read().decode() if spies[name].stderr else ""  # type: ignore[union-attr]
                print(f"\n{name}: no profile ({err.strip()[:200]})")
                continue
            owners, funcs, inclusive, total = summarise(raw)
            print(f"\n== {name}: {total} samples ({raw.relative_to(ROOT)})")
            print("  by library, each sample charged to its innermost frame outside asyncio and the stdlib:")
            for lib, n in owners.most_common():
                print(f"  {100 * n / total:5.1f}%  {lib}")
            print("  functions with the most samples of their own:")
            for func, n in funcs.most_common(25):
                print(f"  {100 * n / total:5.1f}%  {func}")
            print("  loopwire functions, with what they call:")
            for func, n in inclusive.most_common(25):
                print(f"  {100 * n / total:5.1f}%  {func}")
    finally:
        system.stop()
        servers.stop_redis_cluster()
        servers.stop_nats_cluster()
        base.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--layout", default="split", choices=LAYOUT_ORDER)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rate", type=int, default=200, help="samples per second")
    parser.add_argument("--nats-sync", choices=("always", "default"), default="always",
                        help="JetStream's sync_interval, as run_bench's option")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(profile(find_py_spy(), args.layout, args.sessions, args.turns, args.seconds, args.rate,
                        sync_always=args.nats_sync == "always"))


if __name__ == "__main__":
    main()
