"""The speed targets `make bench` judges (issue 24), and their verdicts from a results file.

Every target is relative to the durable floor measured in the same run on the same
servers (durable_floor.py), so a slower or busier machine moves both sides; a layout on
the pass's own servers is judged against the floor's single sessions and load runs that
took turns with its own (passes.py, `floor_alongside`), the machine's drift between the two
left out:

| layout | single-session p50 | CPU per tool-turn | tool-turns/s | tool-turns/s, nats-server's default sync |
|---|---|---|---|---|
| five and six `loopwire serve` processes (`split1`, `split`) | ≤ 1.5× | ≤ 1.5× | ≥ 0.9× | ≥ 0.6× |
| `loopwire up --workers 2` | ≤ 1.5× | — | ≥ 1.3× | ≥ 1.3× |

and every idle `loopwire serve NAME` process: RSS ≤ 90 MB, ≤ 1% of a core, ready (its
first query or work message handled) ≤ 2 s after exec (lean.py). Forking a session of
1,000 events takes under 100 ms, p50, on one Redis (fork_cost.py, issue 27).

A results file keeps each layout's targets beside its measurements (`targets` of the
layout), so a kept file is judged by the targets it was measured against.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

Results = dict[str, Any]
Verdict = tuple[str, str, bool | None]
"""(target, what was measured, met: None for a reference line)."""

RSS_MAX_MB = 90.0
IDLE_CPU_MAX = 0.01
READY_MAX_S = 2.0
LINEAR_TOLERANCE = 0.25
"""Bytes per turn may differ this much between the two halves of the sizes measured."""
FORK_EVENTS = 1000
FORK_TARGET_MS = 100.0
"""Forking a session of FORK_EVENTS events takes under this, p50 (issue 27)."""


@dataclass(frozen=True)
class Targets:
    p50: float | None = None
    """Single-session p50 at most this many times the durable floor's."""
    cpu: float | None = None
    """CPU per tool-turn (every process, the servers included) at most this many times the floor's."""
    turns: float | None = None
    """Tool-turns/s under load at least this many times the floor's."""
    turns_default_sync: float | None = None
    """The same with nats-server's default sync_interval (the second pass)."""

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}


SPLIT = Targets(p50=1.5, cpu=1.5, turns=0.9, turns_default_sync=0.6)
TARGETS: dict[str, Targets] = {"workers": Targets(p50=1.5, turns=1.3, turns_default_sync=1.3),
                               "split1": SPLIT, "split": SPLIT}
"""Layout key (layouts.py) -> its targets; a layout not named is measured for reference."""


def p50(lay: dict[str, Any] | None, run: str = "single") -> float | None:
    if not lay or not lay.get(run):
        return None
    return lay[run]["p50_ms"]


def floor_p50(lay: dict[str, Any], floor_own: float | None) -> float | None:
    """The durable floor's single-session p50 a layout is judged against: that of the floor's
    sessions that alternated with the layout's (passes.py, `single_floor`), else the floor's
    own measurement (a layout on clusters of its own, or a results file from before)."""
    return p50(lay, "single_floor") or floor_own


def alongside_note(lay: dict[str, Any]) -> str:
    return " (the floor's sessions alternating with these)" if p50(lay, "single_floor") else ""


def ms(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.2f} ms"


def cpu_total(lay: dict[str, Any]) -> float:
    return sum(lay.get("cpu_ms", {}).values())


def rates_note(lay: dict[str, Any], lead: str = " (") -> str:
    """The turns/s of each load run, where there were several: ` (median of 3 runs: ...)`;
    `lead` ": " gives `: median of 3 runs: ...` to go inside another parenthesis."""
    rates = lay.get("load_rates") or []
    if len(rates) <= 1:
        return ""
    listed = f"median of {len(rates)} runs: {', '.join(f'{r:.0f}' for r in rates)}"
    return f" ({listed})" if lead == " (" else f"{lead}{listed}"


def loopwire_layouts(res: Results) -> list[dict[str, Any]]:
    return [res["layouts"][k] for k in res.get("order", [])
            if k in res["layouts"] and res["layouts"][k].get("kind") != "floor"]


def layout_verdicts(res: Results, *, default_sync: bool = False) -> list[Verdict]:
    """The targets of every loopwire layout of one pass against that pass's durable floor."""
    out: list[Verdict] = []
    floor = res["layouts"].get("floor_durable")
    if not floor:
        return out
    fd, f_cpu = p50(floor), cpu_total(floor)
    f_tps = (floor.get("load") or {}).get("turns_per_s")
    for lay in loopwire_layouts(res):
        name, t = lay["name"], lay.get("targets") or {}
        a, fa = p50(lay), floor_p50(lay, fd)
        if t.get("p50") and a is not None and fa:
            out.append((f"`{name}`: p50 (single session) ≤ {t['p50']:g}× the durable floor",
                        f"{ms(a)} vs {ms(fa)} = {a / fa:.2f}×{alongside_note(lay)}", a <= t["p50"] * fa))
        beside = lay.get("floor_alongside") or {}
        fc = cpu_total(beside) if beside.get("cpu_ms") else f_cpu
        ft = (beside.get("load") or {}).get("turns_per_s") or f_tps
        note = f" (the floor's load runs taking turns with these{rates_note(beside, ': ')})" if beside else ""
        if t.get("cpu") and lay.get("cpu_ms") and fc:
            c = cpu_total(lay)
            out.append((f"`{name}`: CPU per tool-turn ≤ {t['cpu']:g}× the durable floor",
                        f"{c:.2f} ms vs {fc:.2f} ms = {c / fc:.2f}×{note}", c <= t["cpu"] * fc))
        want = t.get("turns_default_sync" if default_sync else "turns")
        if want and lay.get("load") and ft:
            tps = lay["load"]["turns_per_s"]
            out.append((f"`{name}`: tool-turns/s ≥ {want:g}× the durable floor ({res['params']['sessions']} "
                        f"sessions × {res['params']['turns']} tool-turns)",
                        f"{tps:.0f} vs {ft:.0f} turns/s = {tps / ft:.2f}×{rates_note(lay)}{note}",
                        tps >= want * ft))
        if not t and a is not None and fa:
            out.append((f"(reference) `{name}`: p50 (single session) vs the durable floor",
                        f"{ms(a)} vs {ms(fa)} = {a / fa:.2f}×{alongside_note(lay)}", None))
    return out


def lean_verdicts(res: Results) -> list[Verdict]:
    """RSS, idle CPU and readiness of every `loopwire serve NAME` process, judged on the
    worst one (after start and after the load)."""
    lean = next((lay["lean"] for lay in loopwire_layouts(res) if lay.get("lean")), None)
    if not lean:
        return []
    idle = [(label, facts) for when in ("after_start", "after_load") for label, facts in lean.get(when, {}).items()]
    out: list[Verdict] = []
    if idle:
        worst: dict[str, tuple[float, str]] = {}
        for label, facts in idle:
            for what in ("rss_mb", "idle_cpu_share"):
                if facts[what] >= worst.get(what, (-1.0, ""))[0]:
                    worst[what] = (facts[what], label)
        rss, rss_of = worst["rss_mb"]
        cpu, cpu_of = worst["idle_cpu_share"]
        out.append((f"every idle `loopwire serve NAME`: RSS ≤ {RSS_MAX_MB:.0f} MB",
                    f"at most {rss:.0f} MB ({rss_of})", rss <= RSS_MAX_MB))
        out.append((f"every idle `loopwire serve NAME`: ≤ {100 * IDLE_CPU_MAX:.0f}% of a core",
                    f"at most {100 * cpu:.2f}% ({cpu_of})", cpu <= IDLE_CPU_MAX))
    ready = lean.get("ready_s") or {}
    if ready:
        slowest = max(ready, key=lambda k: ready[k])
        out.append((f"every `loopwire serve NAME`: ready ≤ {READY_MAX_S:g} s after exec",
                    ", ".join(f"{k} {v:.2f} s" for k, v in ready.items()), ready[slowest] <= READY_MAX_S))
    return out


def bytes_verdict(res: Results) -> list[Verdict]:
    sizes = sorted(int(n) for n in res.get("bytes", {}))
    if len(sizes) < 3:
        return []
    lo, mid, hi = sizes[0], sizes[len(sizes) // 2], sizes[-1]
    b = {n: res["bytes"][str(n)]["total"] for n in (lo, mid, hi)}
    first, second = (b[mid] - b[lo]) / (mid - lo), (b[hi] - b[mid]) / (hi - mid)
    linear = abs(second - first) <= LINEAR_TOLERANCE * max(first, second)
    return [("Redis bytes linear in turns",
             f"{b[lo] / lo:.0f} B/turn at {lo}, {b[hi] / hi:.0f} B/turn at {hi}; marginal "
             f"{first:.0f} B/turn ({lo}→{mid}) vs {second:.0f} B/turn ({mid}→{hi})", linear)]


def fork_verdict(res: Results) -> list[Verdict]:
    fork = res.get("fork")
    if not fork:
        return []
    return [(f"forking a session of {FORK_EVENTS:,} events (p50, one Redis)",
             f"{ms(fork['p50_ms'])} p50, {ms(fork['p99_ms'])} p99 over {fork['forks']} forks of "
             f"{fork['events']} events / {fork['messages']} messages ({fork['layout']})",
             fork["p50_ms"] < FORK_TARGET_MS and fork["events"] >= FORK_EVENTS)]


PROVIDER_ADDED_P50_MS = 50.0
PROVIDER_ADDED_P99_MS = 500.0
PROVIDER_RSS_PER_SESSION_KB = 64.0
PROVIDER_LIMIT_SHARE = 0.95
"""The provider-bound pass (provider_bound.py, issue 42): loopwire's own time per tool-turn
beside a 5 s model and a 0.5 s tool, its memory per session in flight, and the share of a
model limit a backlog achieves."""


def provider_verdicts(res: Results) -> list[Verdict]:
    pb = res.get("provider_bound")
    if not pb:
        return []
    load = pb["load"]
    what = (f"{load['sessions']:,} sessions × {load['turns']} tool-turns, a {pb['model_s']:g} s model, "
            f"a {pb['tool_s']:g} s tool")
    out: list[Verdict] = [
        (f"provider-bound ({what}): every run completed", f"{load['n_failures']} failed in {load['wall_s']:.1f} s",
         load["n_failures"] == 0),
        (f"provider-bound: loopwire's time per tool-turn beyond the model's and the tool's, p50 ≤ "
         f"{PROVIDER_ADDED_P50_MS:g} ms", f"{load['added_p50_ms']:.1f} ms", load["added_p50_ms"] <= PROVIDER_ADDED_P50_MS),
        (f"provider-bound: the same, p99 ≤ {PROVIDER_ADDED_P99_MS:g} ms", f"{load['added_p99_ms']:.1f} ms",
         load["added_p99_ms"] <= PROVIDER_ADDED_P99_MS),
        (f"provider-bound: RSS per session in flight ≤ {PROVIDER_RSS_PER_SESSION_KB:g} KB over loopwire's processes",
         f"{load['rss_per_session_kb']:.0f} KB", load["rss_per_session_kb"] <= PROVIDER_RSS_PER_SESSION_KB),
        ("(reference) provider-bound: CPU per tool-turn, every process and the servers",
         f"{sum(load['cpu_ms_per_tool_turn'].values()):.2f} ms", None)]
    limited = pb.get("limited")
    if limited:
        fake, lim = limited["fake"], limited["limits"]
        held = (fake["max_in_flight"] <= lim["max_concurrent"] and fake["max_in_60s"] <= lim["rpm"]
                and fake["rate_limited"] == 0 and limited["n_failures"] == 0)
        out.append((f"provider-bound under `max_concurrent: {lim['max_concurrent']}`, `rpm: {lim['rpm']}` "
                    f"({limited['sessions']} sessions): every run completed, the limits held, 0 429s",
                    f"{limited['n_failures']} failed; at most {fake['max_in_flight']} in flight, {fake['max_in_60s']} "
                    f"in any 60 s, {fake['rate_limited']} 429s", held))
        rpm = fake.get("achieved_rpm", 0.0)
        out.append((f"provider-bound: requests per minute achieved with a backlog ≥ {100 * PROVIDER_LIMIT_SHARE:.0f}% "
                    "of the limit", f"{rpm:.0f} of {lim['rpm']} = {100 * rpm / lim['rpm']:.0f}%",
                    rpm >= PROVIDER_LIMIT_SHARE * lim["rpm"]))
    return out


CACHE_SHARE_MIN = 0.8
CACHE_COST_MAX = 0.35
"""The cost pass (cost_pass.py, issue 43): from turn 3 each request reads at least this share
of its input from the prompt cache, the cached run costs at most this share of the uncached
one, and the request after next of a compaction reads the share again."""


def cost_verdicts(res: Results) -> list[Verdict]:
    cost = res.get("cost")
    if not cost:
        return []
    cached, uncached = cost["cached"], cost["uncached"]
    ratio, after = cost.get("cost_ratio"), cost.get("after_compaction_share")
    return [
        (f"cost pass ({cost['turns']} tool-turns, {cost['model']}): from turn 3 each request reads ≥ "
         f"{100 * CACHE_SHARE_MIN:.0f}% of its input from the prompt cache",
         f"at least {100 * cost['min_share_from_turn_3']:.1f}%", cost["min_share_from_turn_3"] >= CACHE_SHARE_MIN),
        (f"cost pass: the cached run costs ≤ {100 * CACHE_COST_MAX:.0f}% of the uncached one",
         f"{cached['cost_usd']:.4f} vs {uncached['cost_usd']:.4f} USD = "
         f"{100 * ratio:.0f}%" if ratio is not None else "n/a", ratio is not None and ratio <= CACHE_COST_MAX),
        (f"cost pass: after a compaction, the request after next reads ≥ {100 * CACHE_SHARE_MIN:.0f}% again",
         f"at least {100 * after:.1f}% after each of {cost['compacting']['compactions']} compactions"
         if after is not None else "no compaction happened", after is not None and after >= CACHE_SHARE_MIN)]


def verdicts(res: Results) -> list[Verdict]:
    """Every target of the run: the layouts against the durable floor, the idle processes,
    Redis bytes, a fork's cost, the floors' reference line; then the pass with nats-server's
    default sync."""
    out = layout_verdicts(res) + lean_verdicts(res)
    fd, fr = p50(res["layouts"].get("floor_durable")), p50(res["layouts"].get("floor_raw"))
    if fd and fr:
        out.append(("(reference) the durable floor vs the raw floor, p50 (single session)",
                    f"{ms(fd)} vs {ms(fr)} = {fd / fr:.2f}×", None))
    out += bytes_verdict(res) + fork_verdict(res) + provider_verdicts(res) + cost_verdicts(res)
    second = res.get("default_sync")
    if second:
        out += [(f"with nats-server's default sync: {target}", measured, met)
                for target, measured, met in layout_verdicts({**second, "params": res["params"]}, default_sync=True)]
    return out
