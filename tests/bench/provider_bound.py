"""The provider-bound pass of `make bench`: loopwire when the model takes seconds.

    .venv/bin/python -m tests.bench.provider_bound            # alone (also part of make bench)
    .venv/bin/python -m tests.bench.provider_bound --quick    # 100 sessions, for development

In the split layout with two routers, on the bench's own nats-server and redis-server,
against the fake Messages API in a process of its own (loopwire.testing.fake_anthropic with
the responder of provider_model.py and a latency model: each generation takes MODEL_S, its
first token after FIRST_TOKEN_S, the rest in four pieces, so the fake stays cheap) and a tool
that takes TOOL_S (bench_tools.wait):

1. `--sessions` concurrent sessions (1,000) × `--turns` tool-turns (5): every run
   completed; loopwire's time per tool-turn beyond the model's and the tool's own (the
   interval between two `message` events of a session, less MODEL_S + TOOL_S), p50 and p99;
   the RSS of every process at its peak (sampled every 0.5 s) and the growth per session in
   flight over loopwire's processes; CPU per tool-turn.
2. The same model under `LOOPWIRE_MODEL_LIMITS={"*": LIMITED}` with `--limited-sessions`
   (200): the most requests the fake had in flight, the most that began in any 60 s, its
   429s, and the requests per minute achieved while the backlog lasted, against the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from typing import Any

import nats

from loopwire.testing import LAYOUTS

from .bench_tools import WAIT_S
from .driver import BenchDriver, wait_for_tool
from .layouts import ROOT, BenchLayout, Servers, System, start_servers
from .measuring import log
from .passes import run_async
from .procstat import cpu_seconds_with_children

MODEL_S = 5.0
FIRST_TOKEN_S = 1.0
TOOL_S = WAIT_S
LIMITED = {"max_concurrent": 50, "rpm": 600}
RSS_SAMPLE_S = 0.5
STEADY_SKIP_S = 5.0
"""The limited run's rate is counted from this long after its first request to this long
before its last (a backlog forms at once with four times the sessions the limit holds)."""


class FakeProvider:
    """The fake Messages API in a process of its own (the bench's CPU is not its CPU)."""

    def __init__(self, responder: str = "tests.bench.provider_model:respond") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopwire.testing.fake_anthropic", "--port", "0", "--responder", responder],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("FAKE_ANTHROPIC_URL="):
            self.stop()
            raise RuntimeError(f"the fake Messages API did not start: {line!r}")
        self.url = line.split("=", 1)[1]

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as reply:
            return dict(json.loads(reply.read()))

    def paced(self) -> None:
        """Empty, and every generation taking MODEL_S."""
        self.call("/_fake/reset", {})
        self.call("/_fake/latency", {"model": "*", "first_token_s": FIRST_TOKEN_S, "total_s": MODEL_S, "chunks": 4})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def provider_layout(fake_url: str, limits: dict[str, Any] | None) -> BenchLayout:
    env = {"LOOPWIRE_LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": fake_url,
           "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-real-key", "LOOPWIRE_LLM_MAX_RETRIES": "0"}
    if limits is not None:
        env["LOOPWIRE_MODEL_LIMITS"] = json.dumps({"*": limits})
    name = "split, a 5 s model" + (f", limits {limits}" if limits else "")
    return BenchLayout("provider", name, LAYOUTS["split"], env=tuple(env.items()))


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _load(servers: Servers, pids: dict[str, int], sessions: int, turns: int) -> dict[str, Any]:
    await wait_for_tool(servers.redis.url, "wait")
    driver = BenchDriver(await nats.connect(servers.nats_url), tool="wait")
    await driver.start()
    try:
        warm = await driver.run_load("pbwarm", min(20, sessions), 1, timeout=120)
        if warm.failures:
            raise RuntimeError(f"the warm-up failed: {warm.failures[:3]}")
        baseline = {label: rss_kb(pid) for label, pid in pids.items()}
        peak = dict(baseline)
        server_pids = servers.pids()
        cpu_before = {label: cpu_seconds_with_children(pid) for label, pid in {**pids, **server_pids}.items()}

        async def sample() -> None:
            while True:
                for label, pid in pids.items():
                    peak[label] = max(peak[label], rss_kb(pid))
                await asyncio.sleep(RSS_SAMPLE_S)

        sampler = asyncio.create_task(sample())
        try:
            result = await driver.run_load("pb", sessions, turns, timeout=60 + 4 * turns * (MODEL_S + TOOL_S) * 3)
        finally:
            sampler.cancel()
        cpu = {label: cpu_seconds_with_children(pid) - cpu_before[label]
               for label, pid in {**pids, **server_pids}.items()}
    finally:
        await driver.stop()
        await driver.nc.drain()
    added_ms = [1000 * (interval - MODEL_S - TOOL_S) for interval in result.latencies_s]
    growth_kb = sum(peak.values()) - sum(baseline.values())
    return {"sessions": sessions, "turns": turns, "wall_s": result.wall_s, "failures": result.failures[:5],
            "n_failures": len(result.failures), "tool_turns": result.tool_turns,
            "added_p50_ms": percentile(added_ms, 0.5), "added_p99_ms": percentile(added_ms, 0.99),
            "interval_p50_s": percentile(result.latencies_s, 0.5),
            "rss_baseline_mb": {k: v / 1024 for k, v in baseline.items()},
            "rss_peak_mb": {k: v / 1024 for k, v in peak.items()},
            "rss_per_session_kb": growth_kb / sessions,
            "cpu_ms_per_tool_turn": {k: 1000 * v / max(1, result.tool_turns) for k, v in cpu.items()}}


def run_one(servers: Servers, fake: FakeProvider, sessions: int, turns: int,
            limits: dict[str, Any] | None) -> dict[str, Any]:
    fake.paced()
    layout = provider_layout(fake.url, limits)
    log(f"provider-bound: {layout.name}, {sessions} sessions × {turns} tool-turns")
    system = System(servers, layout)
    system.start()
    fake_cpu = cpu_seconds_with_children(fake.proc.pid)
    try:
        out = run_async(lambda: _load(servers, system.pids(), sessions, turns))
    finally:
        system.stop()
    # The fake shares the machine: its CPU is loopwire's competition here, not its cost.
    out["fake_cpu_ms_per_tool_turn"] = 1000 * (cpu_seconds_with_children(fake.proc.pid) - fake_cpu) / max(
        1, out["tool_turns"])
    stats = fake.call("/_fake/stats")
    arrivals = sorted(stats["arrivals"])
    served = stats.get("served_s") or []
    # The fake shares the machine: what it took beyond MODEL_S is in the added time too.
    out["fake"] = {"requests": len(arrivals), "max_in_flight": stats["max_in_flight"],
                   "rate_limited": len(stats["rate_limited"]), "max_in_60s": max_in_window(arrivals, 60.0),
                   "served_p50_s": percentile(served, 0.5), "served_p99_s": percentile(served, 0.99)}
    if limits is not None and len(arrivals) > 2:
        start, end = arrivals[0] + STEADY_SKIP_S, arrivals[-1] - STEADY_SKIP_S
        steady = [t for t in arrivals if start <= t <= end]
        out["fake"]["achieved_rpm"] = 60 * len(steady) / (end - start) if end > start else 0.0
        out["limits"] = limits
    log(f"provider-bound: {out['n_failures']} failures, added per tool-turn p50 {out['added_p50_ms']:.1f} ms, "
        f"p99 {out['added_p99_ms']:.1f} ms, {out['rss_per_session_kb']:.0f} KB per session, fake {out['fake']}")
    return out


def max_in_window(arrivals: list[float], window_s: float) -> int:
    best, lo = 0, 0
    for hi, t in enumerate(arrivals):
        while arrivals[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def measure_provider_bound(servers: Servers, sessions: int, turns: int, limited_sessions: int) -> dict[str, Any]:
    fake = FakeProvider()
    try:
        res = {"model_s": MODEL_S, "first_token_s": FIRST_TOKEN_S, "tool_s": TOOL_S,
               "load": run_one(servers, fake, sessions, turns, None)}
        if limited_sessions:
            res["limited"] = run_one(servers, fake, limited_sessions, turns, LIMITED)
        return res
    finally:
        fake.stop()


def summary_lines(res: dict[str, Any]) -> list[str]:
    load = res["load"]
    lines = [f"{load['sessions']} sessions × {load['turns']} tool-turns on a {res['model_s']:g} s model, "
             f"{res['tool_s']:g} s tool: {load['wall_s']:.1f} s, {load['n_failures']} failed; added per tool-turn "
             f"p50 {load['added_p50_ms']:.1f} ms, p99 {load['added_p99_ms']:.1f} ms; "
             f"{load['rss_per_session_kb']:.0f} KB RSS per session in flight; "
             f"{sum(load['cpu_ms_per_tool_turn'].values()):.2f} ms CPU per tool-turn"]
    limited = res.get("limited")
    if limited:
        fake = limited["fake"]
        lines.append(f"under {limited['limits']}: {limited['n_failures']} failed; the fake saw at most "
                     f"{fake['max_in_flight']} in flight and {fake['max_in_60s']} in any 60 s, "
                     f"{fake['rate_limited']} 429s; {fake.get('achieved_rpm', 0):.0f} requests/min achieved")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sessions", type=int)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--limited-sessions", type=int)
    p.add_argument("--out", default=str(ROOT / ".run" / "bench-provider.json"))
    args = p.parse_args(argv)
    sessions = args.sessions or (100 if args.quick else 1000)
    limited = args.limited_sessions if args.limited_sessions is not None else (60 if args.quick else 200)
    servers = start_servers(sync_always=True)
    try:
        res = measure_provider_bound(servers, sessions, args.turns, limited)
    finally:
        servers.stop()
    out = ROOT / args.out if not os.path.isabs(args.out) else args.out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    for line in summary_lines(res):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
