"""The bench's console table: every pass's layouts, CPU by process and wire counts, the
idle processes, the clusters' facts, and every target `[MET ]` or `[MISS]` (targets.py)."""

from __future__ import annotations

from typing import Any

from .report import Results, keys_per_master, layouts, leaders_summary, lean_of, lean_rows, ratio
from .targets import cpu_total, floor_p50, ms, p50, verdicts


def console_table(res: Results) -> str:
    m = res["machine"]
    lines = [f"loopwire bench — {res['date']} — {m.get('cpus')} CPUs, Python {m.get('python')}, "
             f"code {m.get('git')}" + (" — QUICK MODE (not the issue's load)" if res["params"].get("quick") else ""),
             ""]
    lines += _console_pass(res)
    if res.get("bytes"):
        lines.append("")
        for n, b in sorted(res["bytes"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"Redis bytes, session of {n} tool-turns: {b['total']} B ({b['total'] / int(n):.0f} B/turn, "
                         f"{b['keys']} keys)")
    lean = lean_of(res)
    if lean:
        lines.append("")
        for label, row in lean_rows(lean):
            lines.append(f"idle {label}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    if res.get("consume_us"):
        lines.append("")
        lines += [f"consume path, {mode}: {us:.0f} µs CPU / message" for mode, us in res["consume_us"].items()]
    lines += [f"Redis keys per master, {lay['name']}: {keys_per_master(lay)}"
              for _key, lay in layouts(res, floors=False) if lay.get("redis_keys_per_master")]
    lines += [f"stream leaders, {lay['name']}: {leaders_summary(lay['stream_leaders'])}"
              for _key, lay in layouts(res, floors=False) if lay.get("stream_leaders")]
    for mode, w in (res.get("replica_wait") or {}).items():
        lines.append(f"event append, {mode}: p50 {w['p50_us']:.0f} µs, p99 {w['p99_us']:.0f} µs, {w['per_s']:.0f}/s "
                     f"50 at once, CPU {w['client_cpu_us']:.0f} µs client + {w['master_cpu_us']:.0f} µs master")
    second = res.get("default_sync")
    if second:
        lines += ["", f"-- with nats-server's default sync_interval ({second.get('servers', {}).get('nats', '')})", ""]
        lines += _console_pass(second)
    lines.append("")
    for target, measured, met in verdicts(res):
        lines.append(f"[{'info' if met is None else 'MET ' if met else 'MISS'}] {target}: {measured}")
    for note in res.get("notes", []):
        lines.append(f"note: {note}")
    lines.append(f"({res.get('duration_s', 0):.0f} s in all)")
    return "\n".join(lines)


def _console_pass(res: Results) -> list[str]:
    """One pass's layouts: latency, throughput and CPU, CPU by process, wire counts."""
    fd, fr = p50(res["layouts"].get("floor_durable")), p50(res["layouts"].get("floor_raw"))
    width = max([34, *(len(lay["name"]) + 2 for _, lay in layouts(res))])
    lines = [f"{'layout':<{width}}{'p50':>10}{'p99':>10}{'×dur':>7}{'×raw':>7}{'load p50':>11}{'load p99':>11}"
             f"{'turns/s':>9}{'CPU ms/turn':>13}"]
    for _key, lay in layouts(res):
        s, load = lay.get("single") or {}, lay.get("load") or {}
        rd, rr = ratio(s.get("p50_ms"), floor_p50(lay, fd)), ratio(s.get("p50_ms"), fr)
        lines.append(f"{lay['name']:<{width}}{ms(s.get('p50_ms')):>10}{ms(s.get('p99_ms')):>10}"
                     f"{'' if rd is None else f'{rd:.2f}':>7}{'' if rr is None else f'{rr:.2f}':>7}"
                     f"{ms(load.get('p50_ms')):>11}{ms(load.get('p99_ms')):>11}"
                     f"{load.get('turns_per_s', 0):>9.0f}{cpu_total(lay):>13.2f}")
    lines.append("")
    for _key, lay in layouts(res):
        if not lay.get("cpu_ms"):
            continue
        per = ", ".join(f"{k} {v:.2f}" for k, v in lay["cpu_ms"].items())
        lines.append(f"CPU ms/turn, {lay['name']}: {per}; other processes {100 * lay.get('other_share', 0):.0f}% "
                     "of a core")
    lines.append("")
    for _key, lay in layouts(res):
        w = lay.get("wire")
        if w:
            lines.append(f"per tool-turn under load, {lay['name']}: {wire_summary(w)}")
    return lines


def wire_summary(w: dict[str, Any]) -> str:
    stored = ", ".join(f"{k} {v:.2f}" for k, v in w.get("stored", {}).items())
    nats = f"NATS {w['nats_in_msgs']:.1f} msgs in / {w['nats_out_msgs']:.1f} out, " if "nats_in_msgs" in w else ""
    return (f"{nats}stored: {stored}; Redis {w['redis_commands']:.1f} commands ({w['redis_scripts']:.1f} scripts), "
            f"{w['redis_reads']:.1f} reads")
