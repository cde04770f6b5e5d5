"""Each hop of a tool-turn beside the durable floor's same hop: where a layout's single
session is slower than the floor's, hop by hop.

    .venv/bin/python -m tests.bench.hop_times [--layout split1] [--sessions 10] [--nats-sync default]

The layout and the floor's two responders run on fresh servers, every process loading
tests/bench/timeline_probe/sitecustomize.py (each NATS and script-channel read and write,
noted with the process's CPU; LW_BENCH_TIMELINE_WRAP notes chosen functions too). After a
warm-up, `--sessions` sessions of each × 20 tool-turns take turns (driver.alternated) as
`make bench` runs them. Printed for each side: each hop's median from its work message's
arrival to the process's next hand-over (a work publish or a direct result) and the CPU
the process spent in between, and each hand-over's median from its publish to its arrival;
then the steps of the two slowest loopwire hops (each script-channel write and read on the
way). The notes cost a few µs each: read the differences between hops, not the p50.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import statistics

import nats

from . import durable_floor
from .driver import alternated, warmed_up
from .floor_runs import beside_the_floor
from .layouts import probe_output, with_probe
from .timeline import PROBE

Note = tuple[float, float, str, str, str]
"""(when, the process's CPU, process, kind, first line)."""


def read_notes(out: str, pids: list[int]) -> list[Note]:
    notes: list[Note] = []
    for pid in pids:
        for line in probe_output(out, pid, ".tsv").read_text().splitlines():
            when, cpu, kind, text = line.split("\t", 3)
            notes.append((float(when), float(cpu), str(pid), kind, text))
    return sorted(notes)


def hand_over(kind: str, text: str, prefix: str) -> str | None:
    """The subject's label when the note is a work message or direct result of `prefix`."""
    words = text.split()
    if len(words) < 2 or not words[0].startswith("H") or not words[1].startswith(prefix + "."):
        return None
    subject = words[1]
    if ".direct." in subject:
        return "direct"
    if ".work." in subject:
        return subject.split(".work.", 1)[1]
    return None


def hops(notes: list[Note], prefix: str) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[float]]]:
    """(hop label -> [(wall, CPU)]), (hand-over label -> [wall]) in seconds."""
    held: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    moved: dict[str, list[float]] = collections.defaultdict(list)
    for n, (when, cpu, proc, kind, text) in enumerate(notes):
        label = hand_over(kind, text, prefix)
        if label is None or kind not in ("nats<", "nats>"):
            continue
        for when2, cpu2, proc2, kind2, text2 in notes[n + 1:]:
            label2 = hand_over(kind2, text2, prefix)
            if kind == "nats<" and proc2 == proc and kind2 == "nats>" and label2 is not None:
                held[f"{label} -> {label2}"].append((when2 - when, cpu2 - cpu))
                break
            if kind == "nats>" and kind2 == "nats<" and label2 == label:  # the floor's next hop may be its own
                moved[label].append(when2 - when)
                break
    return held, moved


def steps(notes: list[Note], prefix: str, arriving: str) -> list[tuple[str, float, float]]:
    """The notes of the hops that begin with `arriving`, by the most common sequence:
    (what, median wall since the previous note, median CPU) in ms."""
    seqs: dict[tuple[str, ...], list[list[tuple[float, float]]]] = collections.defaultdict(list)
    for n, (when, cpu, proc, kind, text) in enumerate(notes):
        if kind != "nats<" or not (hand_over(kind, text, prefix) or "").startswith(arriving):
            continue
        seq: list[tuple[str, float, float]] = []
        last = (when, cpu)
        for when2, cpu2, proc2, kind2, text2 in notes[n + 1:]:
            if proc2 != proc:
                continue
            seq.append((f"{kind2} {' '.join(text2.split()[:2])[:60]}", when2 - last[0], cpu2 - last[1]))
            last = (when2, cpu2)
            if kind2 == "nats>" and hand_over(kind2, text2, prefix) is not None:
                break
        seqs[tuple(s[0] for s in seq)].append([(s[1], s[2]) for s in seq])
    if not seqs:
        return []
    key, group = max(seqs.items(), key=lambda kv: len(kv[1]))
    return [(what, 1000 * statistics.median(g[i][0] for g in group), 1000 * statistics.median(g[i][1] for g in group))
            for i, what in enumerate(key)]


def report(side: str, notes: list[Note], prefix: str) -> dict[str, float]:
    held, moved = hops(notes, prefix)
    print(f"{side}:")
    medians = {}
    most = max((len(t) for t in held.values()), default=0)
    for label, times in sorted(held.items()):
        if len(times) < most / 10:
            continue  # a run's last hop, followed by the next run's first
        medians[label] = statistics.median(t[0] for t in times)
        print(f"  hop {label:36s} n={len(times):4d}  {1000 * medians[label]:.3f} ms, "
              f"CPU {1000 * statistics.median(t[1] for t in times):.3f} ms")
    for label, times in sorted(moved.items()):
        print(f"  hand-over {label:30s} n={len(times):4d}  {1000 * statistics.median(times):.3f} ms")
    return medians


async def measure(pids: list[int], servers_nats: str, servers_redis: str, sizes: list[int], sessions: int) -> None:
    layout = await warmed_up(servers_nats, servers_redis, tool_timeout_s=120)
    floor = durable_floor.DurableFloorDriver(await nats.connect(servers_nats), sizes)
    await floor.start()
    await floor.run_load("warm", 40, 5)
    for pid in pids:
        os.kill(pid, signal.SIGUSR2)
    await asyncio.sleep(0.3)
    mine, floors = await alternated(layout, floor, sessions, 20)
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    a, f = statistics.median(mine.latencies_s), statistics.median(floors.latencies_s)
    print(f"single-session p50: layout {1000 * a:.2f} ms, floor {1000 * f:.2f} ms ({a / f:.3f}×)")
    for driver in (layout, floor):
        await driver.stop()
        await driver.nc.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="split1")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--nats-sync", choices=("always", "default"), default="default")
    args = parser.parse_args()
    out = with_probe(PROBE, "LW_BENCH_TIMELINE", "lw-hops-")
    with beside_the_floor(args.layout, sync_always=args.nats_sync == "always") as (servers, system, sizes, floor):
        mine = [pid for label, pid in system.pids().items() if label != "transcripts"]
        theirs = [p.pid for p in floor]
        asyncio.run(measure(mine + theirs, servers.nats_url, servers.redis_url, sizes, args.sessions))
        layout_notes = read_notes(out, mine)
        medians = report(args.layout, layout_notes, "loopwire")
        report("durable floor", read_notes(out, theirs), durable_floor.PREFIX)
        for label in sorted(medians, key=medians.__getitem__, reverse=True)[:2]:
            print(f"steps of {label} (ms since the previous note, wall and CPU):")
            for what, wall, cpu in steps(layout_notes, "loopwire", label.split(" -> ")[0]):
                print(f"  {what:64s} {wall:.3f}  {cpu:.3f}")


if __name__ == "__main__":
    main()
