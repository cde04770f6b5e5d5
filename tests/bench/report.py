"""The bench's results block of docs/benchmarks.md (the console table is console.py's).

Everything is rendered from the results file `make bench` writes (`.run/bench.json`,
plain JSON: results.py), so the doc can be rendered again from a kept file:

    .venv/bin/python -m tests.bench.report [.run/bench.json] [--doc docs/benchmarks.md] [--print]

The results part of the doc sits between two markers and is replaced; the text around it
(the analysis of where the time goes) is written by people and kept.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from .targets import cpu_total, floor_p50, ms, p50, rates_note, verdicts

START = "<!-- bench:results:start (written by `make bench`; edit outside the markers) -->"
END = "<!-- bench:results:end -->"
SUMMARY_START = "<!-- bench:summary:start (written by `make bench`; edit outside the markers) -->"
SUMMARY_END = "<!-- bench:summary:end -->"

FLOORS = ("floor_durable", "floor_raw")

Results = dict[str, Any]


def layouts(res: Results, floors: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """(key, layout) in the order measured: loopwire's layouts, then the floors."""
    out = [(k, res["layouts"][k]) for k in res.get("order", []) if k in res["layouts"]]
    return out if floors else [(k, lay) for k, lay in out if lay.get("kind") != "floor"]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def lean_of(res: Results) -> dict[str, Any] | None:
    return next((lay["lean"] for _k, lay in layouts(res, floors=False) if lay.get("lean")), None)


def lean_rows(lean: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """Per `loopwire serve` process: RSS and idle CPU after start and after the load, and
    (per service) the seconds from exec to its first query or work message handled."""
    out = []
    ready = lean.get("ready_s") or {}
    for label in lean.get("after_start") or lean.get("after_load") or {}:
        row: dict[str, str] = {}
        for when, title in (("after_start", "after start"), ("after_load", "after the load")):
            facts = (lean.get(when) or {}).get(label)
            if facts:
                row[f"RSS {title}"] = f"{facts['rss_mb']:.0f} MB"
                row[f"CPU idle {title}"] = f"{100 * facts['idle_cpu_share']:.2f}%"
        service = label.split()[0]
        if service in ready and label == service:
            row["ready after exec"] = f"{ready[service]:.2f} s"
        out.append((label, row))
    return out


def keys_per_master(lay: dict[str, Any]) -> str:
    return ", ".join(f"{count}" for _master, count in sorted(lay["redis_keys_per_master"].items()))


def leaders_summary(by_node: dict[str, list[str]]) -> str:
    """`n0: LOOPWIRE_WORK; n1: —`: which node led each stream at the end of the run."""
    return "; ".join(f"{node}: {', '.join(streams) or '—'}" for node, streams in sorted(by_node.items()))


# -- markdown ----------------------------------------------------------------------------------
def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def layout_table(res: Results) -> list[str]:
    fd, fr = p50(res["layouts"].get("floor_durable")), p50(res["layouts"].get("floor_raw"))
    out = ["| layout | single p50 | single p99 | ×durable | ×raw | load p50 | load p99 | turns/s | CPU ms / turn |",
           "|---|---|---|---|---|---|---|---|---|"]
    for _key, lay in layouts(res):
        s, load = lay.get("single") or {}, lay.get("load") or {}
        rd, rr = ratio(s.get("p50_ms"), floor_p50(lay, fd)), ratio(s.get("p50_ms"), fr)
        out.append(_row([lay["name"], ms(s.get("p50_ms")), ms(s.get("p99_ms")),
                         "" if rd is None else f"{rd:.2f}×", "" if rr is None else f"{rr:.2f}×",
                         ms(load.get("p50_ms")), ms(load.get("p99_ms")),
                         f"{load.get('turns_per_s', 0):.0f}{rates_note(lay)}", f"{cpu_total(lay):.2f}"]))
    return out


def beside_table(res: Results) -> list[str]:
    """Each layout beside the durable floor's sessions and load runs that took turns with its own."""
    rows = [(lay, lay.get("single_floor") or {}, lay.get("floor_alongside") or {}) for _key, lay in layouts(res)
            if lay.get("single_floor")]
    if not rows:
        return []
    out = ["| layout | single p50 | the floor's, in turns | load turns/s | the floor's, in turns | CPU ms / turn | "
           "the floor's, in turns |", "|---|---|---|---|---|---|---|"]
    for lay, single, beside in rows:
        load, floor_load = lay.get("load") or {}, beside.get("load") or {}
        out.append(_row([lay["name"], ms((lay.get("single") or {}).get("p50_ms")), ms(single.get("p50_ms")),
                         f"{load.get('turns_per_s', 0):.0f}{rates_note(lay)}",
                         f"{floor_load['turns_per_s']:.0f}{rates_note(beside)}" if floor_load else "—",
                         f"{cpu_total(lay):.2f}", f"{cpu_total(beside):.2f}" if beside.get("cpu_ms") else "—"]))
    return out


def cpu_table(res: Results) -> list[str]:
    out = ["| layout | process | CPU ms / turn | % of a core |", "|---|---|---|---|"]
    for _key, lay in layouts(res):
        if not lay.get("cpu_ms"):
            continue
        for proc, cpu in lay["cpu_ms"].items():
            out.append(_row([lay["name"], proc, f"{cpu:.2f}", f"{100 * lay['cpu_share'][proc]:.0f}%"]))
        out.append(_row([lay["name"], "**all of the above**", f"**{cpu_total(lay):.2f}**",
                         f"{100 * sum(lay['cpu_share'].values()):.0f}%"]))
        out.append(_row([lay["name"], "(other processes on the machine)", f"{lay.get('other_ms', 0):.2f}",
                         f"{100 * lay.get('other_share', 0):.0f}%"]))
    return out


def run_lines(res: Results) -> list[str]:
    """When, where and with what load the results were measured."""
    m, p = res["machine"], res["params"]
    return [f"Last run: **{res['date']}**, `{res['command']}`, {res['duration_s']:.0f} s in all, code at "
           f"`{m.get('git', 'unknown')}`" + (" — **quick mode, not the issue's load**" if p.get("quick") else "") + ".",
           f"Machine: {m.get('cpus')} CPUs ({m.get('cpus_usable')} usable, {m.get('cpu_model')}), "
           f"Python {m.get('python')}, {m.get('platform')}. Servers started by the bench on loopback: "
           f"{res.get('servers', {}).get('nats', 'nats-server')}; {res.get('servers', {}).get('redis', 'redis-server')}.",
           f"Load: {p['sessions']} concurrent sessions × {p['turns']} tool-turns, {p['load_runs']} runs per layout "
           f"(the median by turns/s is shown); single: {p['single']} sessions × {p['turns']} tool-turns one at a time; "
           f"warm-up {p['warmup']} sessions × 5 tool-turns."]


def targets_table(res: Results) -> list[str]:
    out = ["| target | measured | met? |", "|---|---|---|"]
    for target, measured, met in verdicts(res):
        out.append(f"| {target} | {measured} | {'—' if met is None else 'yes' if met else '**no**'} |")
    return out


def summary(res: Results) -> str:
    """docs/benchmarks.md's block: the run and its targets; the rest is in the full block."""
    return "\n".join([SUMMARY_START, "", *run_lines(res), "", *targets_table(res), "",
                      "Every table of this run: docs/bench-results.md.", "", SUMMARY_END])


def provider_table(res: Results) -> list[str]:
    pb = res.get("provider_bound")
    if not pb:
        return []
    out = ["", "### When the model takes seconds (the provider-bound pass)", "",
           f"The split layout (two routers) against the fake Messages API in a process of its own: each generation "
           f"takes {pb['model_s']:g} s (its first token after {pb['first_token_s']:g} s), each tool call "
           f"{pb['tool_s']:g} s. Added: a tool-turn's interval less those {pb['model_s'] + pb['tool_s']:g} s.", "",
           "| run | sessions | wall | added p50 | added p99 | RSS / session | the fake saw |", "|---|---|---|---|---|---|---|"]
    for name, run in (("no limits", pb["load"]), ("model limits", pb.get("limited"))):
        if not run:
            continue
        fake = run["fake"]
        seen = (f"{fake['requests']} requests, at most {fake['max_in_flight']} in flight, {fake['max_in_60s']} in 60 s, "
                f"{fake['rate_limited']} 429s" + (f", {fake['achieved_rpm']:.0f}/min" if "achieved_rpm" in fake else "")
                + (f"; it answered in {fake['served_p50_s']:.2f} s p50, {fake['served_p99_s']:.2f} s p99"
                   if fake.get("served_p50_s") is not None else ""))
        label = name if name == "no limits" else f"{name} {run.get('limits')}"
        out.append(f"| {label} | {run['sessions']} × {run['turns']} | {run['wall_s']:.1f} s | {run['added_p50_ms']:.1f} ms "
                   f"| {run['added_p99_ms']:.1f} ms | {run['rss_per_session_kb']:.0f} KB | {seen} |")
    peak = pb["load"]["rss_peak_mb"]
    out += ["", "RSS at the peak (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items())]
    return out


def cost_table(res: Results) -> list[str]:
    cost = res.get("cost")
    if not cost:
        return []
    out = ["", "### What prompt caching saves (the cost pass)", "",
           f"One session of {cost['turns']} tool-turns on {cost['model']} (a system prompt of about 2,000 tokens, ten "
           "tools, results of about 500 tokens), split layout with two memory and two llm replicas, against the fake's "
           "prompt cache.", "", "| run | status | turns | cost | input read from cache | compactions |", "|---|---|---|---|---|---|"]
    for label in ("cached", "uncached", "compacting"):
        run = cost[label]
        usage = run.get("usage") or {}
        total = usage.get("input_tokens") or 0
        share = f"{100 * usage.get('cache_read_input_tokens', 0) / total:.0f}%" if total else "—"
        out.append(f"| {label} | {run['status']} | {run['turns']} | {run['cost_usd']:.4f} USD | {share} | "
                   f"{run['compactions']} |")
    return out


def markdown(res: Results) -> str:
    out = [START, "", *run_lines(res), "", "### Targets", "", *targets_table(res), *provider_table(res),
           *cost_table(res)]

    out += ["", "### Every layout against both floors", "",
            "p50/p99 of one tool-turn: the time between two consecutive `message` events of a session as the "
            "client receives them (tool.call → tools → tool.result → router → memory → llm → router → "
            "message); for the raw floor, its five request/reply hops. ×durable, ×raw: the single-session "
            "p50 over that floor's; ×durable over the durable floor's sessions that alternated with the "
            "layout's, one of each in turn on the same servers (the layouts on clusters of their own: over the "
            "floor's own row). turns/s: tool-turns / wall time from the first `start` to the last "
            "`run.ended`. CPU: every process of the layout plus nats-server, redis-server (with the "
            "children it forks: its AOF rewrites) and the bench client, during the load run.", "",
            *layout_table(res)]
    beside = beside_table(res)
    if beside:
        out += ["", "The durable floor beside each layout: its single sessions took turns with the layout's (one of "
                "each, on the same servers), and for a layout with targets its load runs too; the targets judge the "
                "layout against these.", "", *beside]
    out += ["", "The floors: the same five hops per tool-turn, the same Redis calls (counted by the trace below) "
            "and events (as many stored per run: one of fewer than one per tool-turn, such as memory's "
            "observations, every so many turns, and the run's own, such as `run.started`, once per run), "
            "envelopes of the sizes the trace saw, raw nats-py + redis-py + orjson and no logic. "
            "**Durable**: each hop a JetStream work-queue message (publish awaiting its PubAck, a push "
            "consumer with a deliver group, an ack), the events published into a JetStream stream with their "
            "PubAcks awaited, on the same servers as loopwire (`tests/bench/durable_floor.py`). **Raw**: each "
            "hop a core-NATS request/reply, events fire-and-forget (`tests/bench/floor.py`).", ""]

    out += ["### CPU per tool-turn by process (during the load run)", "",
            "From `/proc/<pid>/stat` (utime + stime) before and after the load run shown above; ms of CPU "
            "per tool-turn, and the share of one core the process used over the run's wall time.", "",
            *cpu_table(res), ""]
    lean = lean_of(res)
    if lean:
        rows = lean_rows(lean)
        columns = list(dict.fromkeys(c for _label, row in rows for c in row))
        out += ["### Idle `loopwire serve` processes", "",
                "RSS (`VmRSS`) and the share of a core each process of the split layout used over an idle "
                f"window of {lean.get('window_s', 5):g} s, right after it started and again after the load; "
                "ready: from the exec of a new `loopwire serve NAME` (its service's other processes stopped) to "
                "its first work message handled (the work waiting for it: a `start`, a run stalled at its "
                "hop) or, for transcripts, its first `session.get` answered (`tests/bench/lean.py`).", "",
                "| process | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
        out += [_row([label, *(row.get(c, "") for c in columns)]) for label, row in rows]
        out.append("")
    second = res.get("default_sync")
    if second:
        out += ["### The same with nats-server's default `sync_interval`", "",
                f"A second pass on fresh servers, {second.get('servers', {}).get('nats', 'nats-server')}: the "
                "durable floor above waits on an fsync per stored message, which must not hide loopwire's own "
                "CPU. Its targets are in the table of targets above (\"with nats-server's default sync\").", "",
                *layout_table(second), "", *beside_table(second), "", *cpu_table(second), ""]
    out += wire_tables(res)
    out += trace_tables(res)
    if res.get("bytes"):
        groups = sorted({g for b in res["bytes"].values() for g in b if g not in ("total", "keys")})
        out += ["### Redis bytes per session", "",
                "`MEMORY USAGE <key> SAMPLES 0` summed over every key of one session (state, history, "
                "event stream, event keys, seq, model and tool records), after a single session of N "
                "tool-turns (`loopwire up --workers 2`).", "",
                "| tool-turns | " + " | ".join(groups) + " | total | bytes / turn |",
                "|---|" + "---|" * (len(groups) + 2)]
        for n, b in sorted(res["bytes"].items(), key=lambda kv: int(kv[0])):
            out.append(f"| {n} | " + " | ".join(str(b.get(g, 0)) for g in groups)
                       + f" | {b['total']} | {b['total'] / int(n):.0f} |")
        out.append("")
    if res.get("consume_us"):
        out += ["### The consume path alone", "",
                "CPU per JetStream work message received and acked by a handler that does nothing "
                "(a push consumer with a deliver group, a stream in memory), publishing included, best of "
                "two rounds of 4,000 messages (`tests/bench/consume_overhead.py`).", "",
                "| handler | µs CPU / message |", "|---|---|"]
        out += [f"| {mode} | {us:.0f} |" for mode, us in res["consume_us"].items()]
        out.append("")
    out += cluster_tables(res)
    if res.get("notes"):
        out += ["Notes from this run:", ""] + [f"- {n}" for n in res["notes"]] + [""]
    out.append(END)
    return "\n".join(out)


def cluster_tables(res: Results) -> list[str]:
    """The clustered layouts' keys per Redis master and stream leaders, and what waiting for
    a Redis replica costs a write."""
    out: list[str] = []
    clustered = [lay for _key, lay in layouts(res, floors=False) if lay.get("redis_keys_per_master")]
    if clustered:
        out += ["### Keys per Redis master", "",
                "Keys each master of the layout's Redis Cluster held after its load (`DBSIZE`; every session's "
                "keys in one slot).", "", "| layout | keys per master |", "|---|---|"]
        out += [_row([lay["name"], keys_per_master(lay)]) for lay in clustered]
        out.append("")
    led = [lay for _key, lay in layouts(res, floors=False) if lay.get("stream_leaders")]
    if led:
        out += ["### Stream leaders per NATS node", "",
                "Which node led each stream at the end of the layout's run on its NATS cluster (`/jsz`): the "
                "leader stores every publish to its stream and delivers its consumers' messages, so a node "
                "leading the busy streams does more of the work (its CPU: `nats-server n0`, ... above). NATS "
                "counts on a cluster are summed over the nodes: a message routed from one node to another counts "
                "at both.", "", "| layout | node | streams it leads |", "|---|---|---|"]
        out += [_row([lay["name"], node, ", ".join(f"`{s}`" for s in streams) or "—"])
                for lay in led for node, streams in sorted(lay["stream_leaders"].items())]
        out.append("")
    if res.get("replica_wait"):
        out += ["### Waiting for a Redis replica", "",
                "One event append (a durable write) against a master with one replica on loopback, without and "
                "with `WAIT 1` on the same connection (`tests/bench/replica_wait.py`).", "",
                "| | p50 | p99 | appends/s, 50 at once | client µs CPU | master µs CPU |", "|---|---|---|---|---|---|"]
        out += [_row([mode, f"{w['p50_us']:.0f} µs", f"{w['p99_us']:.0f} µs", f"{w['per_s']:.0f}",
                      f"{w['client_cpu_us']:.0f}", f"{w['master_cpu_us']:.0f}"])
                for mode, w in res["replica_wait"].items()]
        out.append("")
    return out


WIRE_ROWS = (
    ("NATS messages received by the server", lambda w: w.get("nats_in_msgs")),
    ("NATS messages sent by the server", lambda w: w.get("nats_out_msgs")),
    ("NATS bytes received by the server", lambda w: w.get("nats_in_bytes")),
)


def wire_tables(res: Results) -> list[str]:
    lays = [(k, lay) for k, lay in layouts(res) if lay.get("wire")]
    if not lays:
        return []
    out = ["### What one tool-turn costs on the wire under load (counted by the servers)", "",
           "Deltas over the load run shown above, per tool-turn (`tests/bench/wire.py`): nats-server's "
           "`/varz`, the streams' sequence numbers (messages stored: work hops, events, ingress), Redis "
           "`INFO stats` and `INFO commandstats` (commands run by Lua scripts are counted as commands; "
           "read events are one per request or pipeline a client sent, close to the round trips).", "",
           "| per tool-turn | " + " | ".join(lay["name"] for _, lay in lays) + " |",
           "|---|" + "---|" * len(lays)]
    for label, get in WIRE_ROWS:
        vals = [get(lay["wire"]) for _, lay in lays]
        if any(v is not None for v in vals):
            out.append(_row([label] + ["" if v is None else f"{v:.1f}" if v < 1000 else f"{v:.0f}" for v in vals]))
    stored = sorted({s for _, lay in lays for s in lay["wire"].get("stored", {})})
    for s in stored:
        out.append(_row([f"JetStream messages stored: {s}"]
                        + [f"{lay['wire'].get('stored', {}).get(s, 0):.2f}" for _, lay in lays]))
    for label, key in (("Redis read events (≈ round trips)", "redis_reads"),
                       ("Redis commands (Lua's included)", "redis_commands"), ("of which script calls", "redis_scripts")):
        out.append(_row([label] + [f"{lay['wire'].get(key, 0):.2f}" for _, lay in lays]))
    out.append("")
    cmds = sorted({c for _, lay in lays for c in lay["wire"].get("redis_by_command", {})},
                  key=lambda c: -max(lay["wire"].get("redis_by_command", {}).get(c, 0) for _, lay in lays))
    if cmds:
        out += ["<details><summary>Redis commands per tool-turn under load, by command (INFO commandstats; "
                "inside scripts included)</summary>", "",
                "| command | " + " | ".join(lay["name"] for _, lay in lays) + " |", "|---|" + "---|" * len(lays)]
        for c in cmds:
            out.append(_row([f"`{c}`"] + [f"{lay['wire'].get('redis_by_command', {}).get(c, 0):g}"
                                          for _, lay in lays]))
        out += ["", "</details>", ""]
    return out


def trace_tables(res: Results) -> list[str]:
    lays = [(k, lay) for k, lay in layouts(res, floors=False) if lay.get("trace")]
    if not lays:
        return []
    out = ["### What one tool-turn does on the wire, by message and command (traced)", "",
           "A `>` NATS subscription and Redis `MONITOR` during two sessions of 1 and 21 tool-turns of each "
           "layout, one at a time; the difference divided by 20 (tool discovery's background traffic left "
           "out). Redis rows are round trips (a command, a script call, a MULTI/EXEC's parts); the commands "
           "inside scripts follow.", "",
           "| NATS messages per tool-turn | " + " | ".join(lay["name"] for _, lay in lays) + " |",
           "|---|" + "---|" * len(lays)]
    kinds = sorted({k for _, lay in lays for k in lay["trace"]["nats_msgs"]})
    for k in kinds:
        out.append(_row([k] + [f"{lay['trace']['nats_msgs'].get(k, 0):g}" for _, lay in lays]))
    out.append(_row(["**all**"] + [f"**{sum(lay['trace']['nats_msgs'].values()):g}**" for _, lay in lays]))
    out += ["", "| Redis round trips per tool-turn | " + " | ".join(lay["name"] for _, lay in lays) + " |",
            "|---|" + "---|" * len(lays)]
    cmds = sorted({k for _, lay in lays for k in lay["trace"]["redis_cmds"]})
    for k in cmds:
        out.append(_row([f"`{k}`"] + [f"{lay['trace']['redis_cmds'].get(k, 0):g}" for _, lay in lays]))
    out.append(_row(["**all**"] + [f"**{sum(lay['trace']['redis_cmds'].values()):g}**" for _, lay in lays]))
    out.append(_row(["inside scripts"] + [", ".join(f"{c} {v:g}" for c, v in sorted(lay["trace"]["lua_cmds"].items()))
                                          for _, lay in lays]))
    out.append("")
    if res.get("floor_plan"):
        out += [f"The floors' plan, built from the trace of `{res.get('floor_plan_from', '?')}` (one hop per "
                "service hop):", "", "| hop | service | envelope bytes | Redis round trips | events published |",
                "|---|---|---|---|---|"]
        sizes = res.get("floor_sizes") or []
        for i, (service, ops, events) in enumerate(res["floor_plan"]):
            out.append(_row([str(i + 1), service, str(sizes[i]) if i < len(sizes) else "",
                             ", ".join(ops) or "-", ", ".join(events) or "-"]))
        out.append("")
    for _key, lay in lays:
        timeline = lay["trace"].get("timeline") or []
        if not timeline:
            continue
        out += [f"<details><summary>Timeline of one tool-turn, `{lay['name']}` (turn 11 of the 21-turn trace "
                "session; NATS times as the spy received them, Redis times from MONITOR, both under the "
                "spy's own load)</summary>", "", "| ms | gap | what |", "|---|---|---|"]
        prev = 0.0
        for at, what in timeline:
            out.append(f"| {at:.2f} | {at - prev:.2f} | {what} |")
            prev = at
        out += ["", "</details>", ""]
    return out


DEFAULT_HEAD = """# Benchmarks

`make bench` measures loopwire's speed targets in every layout against two floors.

"""


def _replace_block(path: Path, block: str, start: str, end: str) -> None:
    if path.exists():
        text = path.read_text()
        if start in text and end in text:
            pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
            path.write_text(pattern.sub(lambda _m: block, text, count=1))
            return
        path.write_text(text.rstrip() + "\n\n## Results\n\n" + block + "\n")
        return
    path.write_text(DEFAULT_HEAD + "## Results\n\n" + block + "\n")


def write_doc(path: Path, res: Results) -> None:
    """Every table of the run into `path`'s results block (docs/bench-results.md)."""
    _replace_block(path, markdown(res), START, END)


def write_summary(path: Path, res: Results) -> None:
    """The run and its targets into `path`'s summary block (docs/benchmarks.md)."""
    _replace_block(path, summary(res), SUMMARY_START, SUMMARY_END)


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description="render a results file of `make bench`")
    parser.add_argument("results", nargs="?", default=str(root / ".run" / "bench.json"))
    parser.add_argument("--doc", default=str(root / "docs" / "bench-results.md"),
                        help="the doc whose results block (every table) to replace")
    parser.add_argument("--summary", default=str(root / "docs" / "benchmarks.md"),
                        help="the doc whose summary block (the targets) to replace")
    parser.add_argument("--print", action="store_true", help="print the console table only; leave the doc alone")
    args = parser.parse_args(argv)
    from .console import console_table  # the console table is built on this module's helpers

    res = json.loads(Path(args.results).read_text())
    print(console_table(res))
    if not args.print:
        write_doc(Path(args.doc), res)
        write_summary(Path(args.summary), res)
        print(f"wrote the results block of {args.doc} and the summary of {args.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
