"""The bench's results: the targets' verdicts, a console table and docs/benchmarks.md.

The results part of the doc sits between two markers and is replaced on every run; the
text around it (the analysis of where the time goes) is written by people and kept.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .driver import LoadResult
from .trace import TurnCost

START = "<!-- bench:results:start (written by `make bench`; edit outside the markers) -->"
END = "<!-- bench:results:end -->"

TARGET_RATIO = 3.0
TARGET_TURNS_PER_S = 400.0
LINEAR_TOLERANCE = 0.25
"""Bytes per turn may differ this much between the two halves (20→100, 100→200)."""


@dataclass
class Layout:
    """One way of running loopwire (or the floor) and what it measured."""

    name: str
    single: LoadResult | None = None
    load: LoadResult | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds per process during `load`."""
    other_cpu_s: float = 0.0
    """CPU seconds of every other process on the machine during `load` (a busy neighbour
    makes every number here worse)."""
    load_rates: list[float] = field(default_factory=list)
    """turns/s of every run of the load; `load` is the median one."""

    def rates_note(self) -> str:
        if len(self.load_rates) <= 1:
            return ""
        return f" (median of {len(self.load_rates)} runs: {', '.join(f'{r:.0f}' for r in self.load_rates)})"

    def cpu_ms_per_turn(self, names: list[str] | None = None) -> float:
        assert self.load is not None
        chosen = self.cpu_s if names is None else {k: v for k, v in self.cpu_s.items() if k in names}
        return 1000 * sum(chosen.values()) / self.load.tool_turns


@dataclass
class Results:
    date: str
    machine: dict[str, str]
    command: str
    sessions: int
    turns: int
    single_sessions: int
    trace: TurnCost | None = None
    up: Layout | None = None
    split: Layout | None = None
    floor: Layout | None = None
    bytes_by_turns: dict[int, dict[str, int]] = field(default_factory=dict)
    service_processes: list[str] = field(default_factory=list)
    infra_processes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    consume_us: dict[str, float] = field(default_factory=dict)
    """CPU µs per message received, by handler style (consume_overhead.py)."""
    floor_plan: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    """(service, Redis ops, events) per hop of the floor."""


# -- numbers ---------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    if q == 50:
        return statistics.median(values)
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def ms(x: float) -> str:
    return "n/a" if x != x else f"{x * 1000:.2f} ms"


def verdicts(res: Results) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each target of the issue."""
    out: list[tuple[str, str, bool | None]] = []
    up, floor = res.up, res.floor
    if up and floor and up.single and floor.single:
        a, b = pct(up.single.latencies_s, 50), pct(floor.single.latencies_s, 50)
        out.append((f"per-turn overhead within {TARGET_RATIO:.0f}x the floor (p50, single session)",
                    f"{ms(a)} vs floor {ms(b)} = {a / b:.1f}x", a <= TARGET_RATIO * b))
    if up and floor and up.load and floor.load:
        a, b = pct(up.load.latencies_s, 50), pct(floor.load.latencies_s, 50)
        out.append((f"(for reference) the same under load, {res.sessions} sessions",
                    f"{ms(a)} vs floor {ms(b)} = {a / b:.1f}x", None))
        ca, cb = up.cpu_ms_per_turn(), floor.cpu_ms_per_turn()
        out.append(("(for reference) CPU per tool-turn, all processes, vs the floor",
                    f"{ca:.2f} ms vs floor {cb:.2f} ms = {ca / cb:.1f}x", None))
    if up and up.load:
        tps = up.load.turns_per_s
        out.append((f"≥ {TARGET_TURNS_PER_S:.0f} tool-turns/s on {res.machine.get('cpus', '?')} cores "
                    f"(`{up.name}`, {res.sessions} sessions)", f"{tps:.0f} turns/s{up.rates_note()}",
                    tps >= TARGET_TURNS_PER_S))
    if {20, 100, 200} <= set(res.bytes_by_turns):
        b20, b100, b200 = (res.bytes_by_turns[n]["total"] for n in (20, 100, 200))
        first, second = (b100 - b20) / 80, (b200 - b100) / 100
        linear = abs(second - first) <= LINEAR_TOLERANCE * max(first, second)
        out.append(("Redis bytes linear in turns",
                    f"{b20 / 20:.0f} B/turn at 20, {b200 / 200:.0f} B/turn at 200; marginal "
                    f"{first:.0f} B/turn (20→100) vs {second:.0f} B/turn (100→200)", linear))
    return out


# -- console -----------------------------------------------------------------------------------
def console_table(res: Results) -> str:
    lines = [f"loopwire bench — {res.date} — {res.machine.get('cpus')} CPUs, Python {res.machine.get('python')}", ""]
    lines.append(f"{'layout':<28}{'single p50':>12}{'single p99':>12}{'load p50':>12}{'load p99':>12}"
                 f"{'turns/s':>10}{'CPU ms/turn':>13}")
    for lay in (res.up, res.split, res.floor):
        if lay is None or lay.load is None:
            continue
        s = lay.single.latencies_s if lay.single else []
        lines.append(f"{lay.name:<28}{ms(pct(s, 50)):>12}{ms(pct(s, 99)):>12}"
                     f"{ms(pct(lay.load.latencies_s, 50)):>12}{ms(pct(lay.load.latencies_s, 99)):>12}"
                     f"{lay.load.turns_per_s:>10.0f}{lay.cpu_ms_per_turn():>13.2f}")
    lines.append("")
    for lay in (res.up, res.split, res.floor):
        if lay is None or lay.load is None:
            continue
        per = ", ".join(f"{k} {1000 * v / lay.load.tool_turns:.2f}" for k, v in lay.cpu_s.items())
        per += f"; other processes {100 * lay.other_cpu_s / lay.load.wall_s:.0f}% of a core"
        lines.append(f"CPU ms/turn, {lay.name}: {per}")
    if res.bytes_by_turns:
        lines.append("")
        for n, b in sorted(res.bytes_by_turns.items()):
            lines.append(f"Redis bytes, session of {n} tool-turns: {b['total']} B ({b['total'] / n:.0f} B/turn, "
                         f"{b['keys']} keys)")
    if res.consume_us:
        lines.append("")
        lines += [f"consume path, {mode}: {us:.0f} µs CPU / message" for mode, us in res.consume_us.items()]
    lines.append("")
    for target, measured, met in verdicts(res):
        lines.append(f"[{'info' if met is None else 'MET ' if met else 'MISS'}] {target}: {measured}")
    for note in res.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# -- markdown ----------------------------------------------------------------------------------
def _latency_row(name: str, lay: Layout | None, which: str) -> str:
    if lay is None:
        return ""
    run = lay.single if which == "single" else lay.load
    if run is None:
        return ""
    lat = run.latencies_s
    return (f"| {name} | {which} | {run.sessions} × {run.turns_per_session} | {ms(pct(lat, 50))} | "
            f"{ms(pct(lat, 99))} | {run.turns_per_s:.0f} |")


SERVICE_OF_SUBJECT = {"tools.execute": "tools", "router.result": "router", "memory.assemble": "memory",
                      "llm.generate": "llm"}


def step_times(timeline: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """(step, ms) from a turn's timeline: each service's time from the delivery of its
    envelope to its next publish (work or the final `message` event), and each hop's time
    from the work publish to its delivery."""
    out: list[tuple[str, float]] = []
    if timeline and not any(w.startswith(("NATS work publish ", "NATS jetstream delivery ")) for _, w in timeline):
        # `loopwire up` with work chains: every hop of the turn is in-process.
        return [("in one process, no work message on the wire: from one `message` event to the next",
                 timeline[-1][0])]
    # The turn opens inside the router: after the `message` event it emits `tool.call`
    # and publishes the tools.execute envelope.
    inside: tuple[str, float] | None = ("router (router.result), from the `message` event", 0.0)
    published: tuple[str, float] | None = None
    for at, what in timeline:
        if what.startswith("NATS work publish "):
            subject = what.split()[3]
            if inside is not None:
                out.append((f"inside {inside[0]}", at - inside[1]))
                inside = None
            published = (subject, at)
        elif what.startswith("NATS jetstream delivery "):
            subject = what.split()[3].rsplit(".work.", 1)[-1]
            if published is not None and published[0] == subject:
                out.append((f"wire: {subject} publish → delivery", at - published[1]))
                published = None
            inside = (f"{SERVICE_OF_SUBJECT.get(subject, subject)} ({subject})", at)
        elif what.startswith("NATS event message") and inside is not None and at > 0:
            out.append((f"inside {inside[0]}, to the `message` event", at - inside[1]))
            inside = None
    total = sum(v for _, v in out)
    if out:
        out.append(("sum of the above", total))
        out.append(("whole turn", timeline[-1][0]))
    return out


def markdown(res: Results) -> str:
    m = res.machine
    out = [START, "",
           f"Last run: **{res.date}**, `{res.command}`, {res.duration_s:.0f} s in all, code at "
           f"`{m.get('git', 'unknown')}`.",
           f"Machine: {m.get('cpus')} CPUs ({m.get('cpus_usable')} usable, {m.get('cpu_model')}), "
           f"Python {m.get('python')}, {m.get('platform')}; nats-server and redis-server on loopback, "
           "started by the bench on free ports.", "",
           "### Targets", "", "| target | measured | met? |", "|---|---|---|"]
    for target, measured, met in verdicts(res):
        out.append(f"| {target} | {measured} | {'—' if met is None else 'yes' if met else '**no**'} |")
    out += ["", "### Per tool-turn latency and throughput", "",
            "Latency of one tool-turn = time between two consecutive `message` events of a session, as "
            "the client receives them (tool.call → tools → tool.result → router → memory → llm → "
            "router → message). For the floor, the time of its five request/reply hops. "
            "turns/s = tool-turns / wall time from the first `start` published to the last `run.ended`.", "",
            "| layout | run | sessions × tool-turns | p50 | p99 | turns/s |", "|---|---|---|---|---|---|"]
    for name, lay in ((f"`{res.up.name}`" if res.up else "`loopwire up`", res.up), ("5 × `loopwire serve`", res.split),
                      ("floor (raw nats-py + redis-py)", res.floor)):
        for which in ("single", "load"):
            row = _latency_row(name, lay, which)
            if row:
                out.append(row)
    out += ["", "`single` runs its sessions one after the other on an idle system; `load` runs them all "
            "at once.", ""]

    out += ["### CPU per tool-turn by process (during the `load` run)", "",
            "From `/proc/<pid>/stat` (utime + stime) before and after; ms of CPU per tool-turn, and the "
            "share of one core the process used over the run's wall time.", "",
            "| layout | process | CPU ms / turn | % of a core |", "|---|---|---|---|"]
    for lay in (res.up, res.split, res.floor):
        if lay is None or lay.load is None:
            continue
        for proc, cpu in lay.cpu_s.items():
            out.append(f"| {lay.name} | {proc} | {1000 * cpu / lay.load.tool_turns:.2f} | "
                       f"{100 * cpu / lay.load.wall_s:.0f}% |")
        out.append(f"| {lay.name} | **all of the above** | **{lay.cpu_ms_per_turn():.2f}** | "
                   f"{100 * sum(lay.cpu_s.values()) / lay.load.wall_s:.0f}% |")
        out.append(f"| {lay.name} | (other processes on the machine) | "
                   f"{1000 * lay.other_cpu_s / lay.load.tool_turns:.2f} | {100 * lay.other_cpu_s / lay.load.wall_s:.0f}% |")
    out.append("")

    if res.trace is not None:
        t = res.trace
        out += ["### What one tool-turn does on the wire (counted)", "",
                "A `>` NATS subscription and Redis `MONITOR` during two sessions of 1 and 21 tool-turns; "
                "the difference divided by 20 (tool discovery's background traffic left out). "
                "The floor makes the same Redis calls per turn and five request/reply hops.", "",
                "| NATS messages per tool-turn | count | bytes |", "|---|---|---|"]
        for k, v in sorted(t.nats_msgs.items()):
            out.append(f"| {k} | {v:g} | {t.nats_bytes.get(k, 0):.0f} |")
        out += ["", "| Redis round trips per tool-turn | count |", "|---|---|"]
        for k, v in sorted(t.redis_cmds.items()):
            out.append(f"| `{k}` | {v:g} |")
        out.append(f"| **all** | **{t.redis_round_trips:g}** |")
        if res.floor_plan:
            out += ["", "The floor's plan built from these counts (one request/reply per hop):", "",
                    "| hop | service | Redis round trips | events published |", "|---|---|---|---|"]
            for i, (service, ops, events) in enumerate(res.floor_plan, 1):
                out.append(f"| {i} | {service} | {', '.join(ops) or '-'} | {', '.join(events) or '-'} |")
        inner = ", ".join(f"{k} {v:g}" for k, v in sorted(t.lua_cmds.items()))
        out += ["", f"Inside those Lua scripts, per tool-turn: {inner}.", ""]
        steps = step_times(t.timeline)
        if steps:
            out += ["", "From the timeline below (one tool-turn of the trace session, so under the spy's and "
                    "MONITOR's own load): time inside each service, from the JetStream delivery of its "
                    "envelope to its next publish, and time on the wire, from a work publish to its delivery.",
                    "", "| step | ms |", "|---|---|"]
            out += [f"| {name} | {value:.2f} |" for name, value in steps]
        if t.timeline:
            out += ["<details><summary>Timeline of one tool-turn on the wire (turn "
                    "11 of the 21-turn trace session; NATS times as the spy received them, Redis times "
                    "from MONITOR, both under the spy's own load)</summary>", "",
                    "| ms | gap | what |", "|---|---|---|"]
            prev = 0.0
            for at, what in t.timeline:
                out.append(f"| {at:.2f} | {at - prev:.2f} | {what} |")
                prev = at
            out += ["", "</details>", ""]

    if res.bytes_by_turns:
        groups = sorted({g for b in res.bytes_by_turns.values() for g in b if g not in ("total", "keys")})
        out += ["### Redis bytes per session", "",
                "`MEMORY USAGE <key> SAMPLES 0` summed over every key of one session (state, history, "
                "event stream, event keys, seq, model and tool records), after a single session of N "
                "tool-turns.", "",
                "| tool-turns | " + " | ".join(groups) + " | total | bytes / turn |",
                "|---|" + "---|" * (len(groups) + 2)]
        for n, b in sorted(res.bytes_by_turns.items()):
            out.append(f"| {n} | " + " | ".join(str(b.get(g, 0)) for g in groups)
                       + f" | {b['total']} | {b['total'] / n:.0f} |")
        out.append("")
    if res.consume_us:
        out += ["### The consume path alone", "",
                "CPU per message received on core NATS by a handler that does nothing, publishing "
                "included, best of two rounds of 4,000 messages (`tests/bench/consume_overhead.py`). "
                "Our work handlers take a `NatsMessage` parameter (the first row); a tool-turn passes "
                "through five of them.", "", "| handler | µs CPU / message |", "|---|---|"]
        out += [f"| {mode} | {us:.0f} |" for mode, us in res.consume_us.items()]
        out.append("")
    if res.notes:
        out += ["Notes from this run:", ""] + [f"- {n}" for n in res.notes] + [""]
    out.append(END)
    return "\n".join(out)


DEFAULT_HEAD = """# Benchmarks

`make bench` measures the speed targets of the foundation issue: 200 concurrent sessions ×
20 tool-turns through `loopwire up` (the scripted model with no delay, one no-op tool), the
same through the five services as separate processes, and the floor — raw nats-py
request/reply and redis-py round trips for the same hops — in the same run. It takes about
two minutes and stops by itself; everything runs on loopback.

    make bench            # or: .venv/bin/python -m tests.bench.run_bench [--sessions N --turns N]

"""


def write_doc(path: Path, res: Results) -> None:
    block = markdown(res)
    if path.exists():
        text = path.read_text()
        if START in text and END in text:
            pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
            path.write_text(pattern.sub(lambda _m: block, text, count=1))
            return
        path.write_text(text.rstrip() + "\n\n## Results\n\n" + block + "\n")
        return
    path.write_text(DEFAULT_HEAD + "## Results\n\n" + block + "\n")


def as_dict(res: Results) -> dict[str, Any]:
    """Plain numbers for a machine-readable copy of the results."""
    def lay(x: Layout | None) -> dict[str, Any] | None:
        if x is None or x.load is None:
            return None
        s = x.single.latencies_s if x.single else []
        return {"single_p50_ms": 1000 * pct(s, 50), "single_p99_ms": 1000 * pct(s, 99),
                "load_p50_ms": 1000 * pct(x.load.latencies_s, 50), "load_p99_ms": 1000 * pct(x.load.latencies_s, 99),
                "turns_per_s": x.load.turns_per_s, "cpu_ms_per_turn": {k: 1000 * v / x.load.tool_turns
                                                                       for k, v in x.cpu_s.items()}}
    trace = None if res.trace is None else {"nats": res.trace.nats_msgs, "redis": res.trace.redis_cmds,
                                            "lua": res.trace.lua_cmds, "timeline": res.trace.timeline}
    return {"date": res.date, "machine": res.machine, "up": lay(res.up), "split": lay(res.split),
            "floor": lay(res.floor), "bytes": res.bytes_by_turns, "trace": trace, "notes": res.notes,
            "consume_us": res.consume_us,
            "verdicts": [{"target": t, "measured": m, "met": ok} for t, m, ok in verdicts(res)]}
