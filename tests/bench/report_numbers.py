"""The numbers the bench's report shows, and the targets' verdicts, from a results file
(report.py renders them; run_bench.py and floor_runs.py log with them)."""

from __future__ import annotations

from typing import Any

LINEAR_TOLERANCE = 0.25
"""Bytes per turn may differ this much between the two halves of the sizes measured."""
FLOORS = ("floor_durable", "floor_raw")

Results = dict[str, Any]


# -- numbers ---------------------------------------------------------------------------------
def ms(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.2f} ms"


def layouts(res: Results, floors: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """(key, layout) in the order measured: loopwire's layouts, then the floors."""
    out = [(k, res["layouts"][k]) for k in res.get("order", []) if k in res["layouts"]]
    return out if floors else [(k, lay) for k, lay in out if lay.get("kind") != "floor"]


def p50(lay: dict[str, Any] | None, run: str = "single") -> float | None:
    if not lay or not lay.get(run):
        return None
    return lay[run]["p50_ms"]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def rates_note(lay: dict[str, Any]) -> str:
    rates = lay.get("load_rates") or []
    if len(rates) <= 1:
        return ""
    return f" (median of {len(rates)} runs: {', '.join(f'{r:.0f}' for r in rates)})"


def cpu_total(lay: dict[str, Any]) -> float:
    return sum(lay.get("cpu_ms", {}).values())


def verdicts(res: Results) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each target of the issue; met None: for reference."""
    out: list[tuple[str, str, bool | None]] = []
    durable = res["layouts"].get("floor_durable")
    raw = res["layouts"].get("floor_raw")
    fd, fr = p50(durable), p50(raw)
    for _key, lay in layouts(res, floors=False):
        name, a = lay["name"], p50(lay)
        target = lay.get("target_ratio")
        if target and a is not None and fd:
            out.append((f"`{name}`: p50 (single session) ≤ {target:g}× the durable floor",
                        f"{ms(a)} vs {ms(fd)} = {a / fd:.2f}×", a <= target * fd))
        tps_target = lay.get("target_turns_per_s")
        if tps_target and lay.get("load"):
            tps = lay["load"]["turns_per_s"]
            out.append((f"`{name}`: ≥ {tps_target:.0f} tool-turns/s ({res['params']['sessions']} sessions × "
                        f"{res['params']['turns']} tool-turns)", f"{tps:.0f} turns/s{rates_note(lay)}",
                        tps >= tps_target))
    for _key, lay in layouts(res, floors=False):
        if lay.get("target_ratio") is None and p50(lay) is not None and fd:
            out.append((f"(reference) `{lay['name']}`: p50 (single session) vs the durable floor",
                        f"{ms(p50(lay))} vs {ms(fd)} = {p50(lay) / fd:.2f}×", None))  # type: ignore[operator]
    if fd and fr:
        out.append(("(reference) the durable floor vs the raw floor, p50 (single session)",
                    f"{ms(fd)} vs {ms(fr)} = {fd / fr:.2f}×", None))
    sizes = sorted(int(n) for n in res.get("bytes", {}))
    if len(sizes) >= 3:
        lo, mid, hi = sizes[0], sizes[len(sizes) // 2], sizes[-1]
        b = {n: res["bytes"][str(n)]["total"] for n in (lo, mid, hi)}
        first, second = (b[mid] - b[lo]) / (mid - lo), (b[hi] - b[mid]) / (hi - mid)
        linear = abs(second - first) <= LINEAR_TOLERANCE * max(first, second)
        out.append(("Redis bytes linear in turns",
                    f"{b[lo] / lo:.0f} B/turn at {lo}, {b[hi] / hi:.0f} B/turn at {hi}; marginal "
                    f"{first:.0f} B/turn ({lo}→{mid}) vs {second:.0f} B/turn ({mid}→{hi})", linear))
    return out
