"""The cost pass of `make bench`: what prompt caching saves a run.

    .venv/bin/python -m tests.bench.cost_pass          # alone (also part of make bench)

One session of TURNS tool-turns (a system prompt of about 2,000 tokens, ten tools, each
tool result about 500 tokens) in the split layout with two routers, two memory and two llm
replicas, against the fake Messages API's prompt cache (loopwire.testing.fake_prompt_cache,
the fake in a process of its own, answering as provider_model.respond_cost), three times:

1. `model.prompt_cache: auto`: the share of each request's input read from the cache;
2. `off`: the same run uncached, its `cost_usd` the baseline (the built-in Sonnet price);
3. `auto` with a context window small enough that the memory service compacts midway:
   the share of the request after next, once the compaction wrote a new prefix.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import nats
import orjson

from .bench_tools import COST_TOOLS
from .driver import wait_for_tool
from .layouts import BenchLayout, Servers, System, start_servers
from .measuring import log
from .passes import run_async
from .provider_bound import FakeProvider

LAYOUT = ("serve router", "serve router", "serve llm", "serve llm", "serve tools", "serve memory", "serve memory",
          "serve transcripts")
MODEL = "claude-sonnet-4-5"
TURNS = 20
SYSTEM = "You keep the ledgers of a small firm and answer from the records you look up. " * 100
"""About 2,000 tokens (a quarter of its characters)."""
COMPACTING_WINDOW = 12_000
"""A context window the run outgrows around its twelfth turn (the memory service compacts at 80%)."""


def cost_layout(fake_url: str) -> BenchLayout:
    env = {"LOOPWIRE_LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": fake_url,
           "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-real-key"}
    return BenchLayout("cost", "split, 2 memory + 2 llm, the caching fake", LAYOUT, env=tuple(env.items()))


async def one_run(nats_url: str, prompt_cache: str, context_window: int | None = None) -> dict[str, Any]:
    nc = await nats.connect(nats_url)
    sid = f"bench-cost-{uuid.uuid4().hex[:10]}"
    ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    compactions: list[dict[str, Any]] = []

    async def on_event(msg: Any) -> None:
        body = orjson.loads(msg.data)
        if body.get("kind") == "compaction":
            compactions.append(body)
        elif body.get("kind") == "run.ended" and not ended.done():
            ended.set_result(body)

    await nc.subscribe(f"loopwire.out.{sid}.>", cb=on_event)
    limits: dict[str, Any] = {"max_turns": TURNS * 2}
    if context_window is not None:
        limits["context_window"] = context_window
    start = {"input": f"bench:{TURNS}", "system": SYSTEM, "tools": COST_TOOLS, "limits": limits,
             "model": {"primary": MODEL, "prompt_cache": prompt_cache}}
    await nc.request(f"loopwire.in.{sid}.start", orjson.dumps(start), timeout=10, headers={"Nats-Msg-Id": sid})
    try:
        end = await asyncio.wait_for(ended, 300)
    finally:
        await nc.drain()
    return {"status": end.get("status"), "turns": end.get("turns"), "cost_usd": end.get("cost_usd"),
            "usage": end.get("usage"), "compactions": len(compactions)}


def generations(stats: dict[str, Any]) -> list[tuple[float, int]]:
    """(share of its input read from the cache, messages sent) of each generation, in order
    (the memory service's summaries, requests without tools, left out)."""
    out = []
    for usage, with_tools, sent in zip(stats["usages"], stats["with_tools"], stats["n_messages"], strict=False):
        if not with_tools:
            continue
        read = usage.get("cache_read_input_tokens", 0)
        total = usage.get("input_tokens", 0) + read + usage.get("cache_creation_input_tokens", 0)
        out.append((read / total if total else 0.0, sent))
    return out


def after_compactions(gens: list[tuple[float, int]]) -> list[float]:
    """The share of the request after next of each compaction (a generation that sent fewer
    messages than the one before: its history was summarised, its prefix new)."""
    compacted = [n for n in range(1, len(gens)) if gens[n][1] < gens[n - 1][1]]
    return [gens[n + 2][0] for n in compacted if n + 2 < len(gens)]


def measure_cost(servers: Servers) -> dict[str, Any]:
    fake = FakeProvider("tests.bench.provider_model:respond_cost")
    system = System(servers, cost_layout(fake.url))
    try:
        system.start()
        run_async(lambda: wait_for_tool(servers.redis.url, COST_TOOLS[-1]))
        out: dict[str, Any] = {"turns": TURNS, "model": MODEL}
        for label, cache, window in (("cached", "auto", None), ("uncached", "off", None),
                                     ("compacting", "auto", COMPACTING_WINDOW)):
            fake.call("/_fake/reset", {})
            log(f"cost pass: {label} ({TURNS} tool-turns, prompt_cache {cache}"
                + (f", context window {window})" if window else ")"))
            run = run_async(lambda: one_run(servers.nats_url, cache, window))  # noqa: B023 - run at once
            gens = generations(fake.call("/_fake/stats"))
            run["read_shares"] = [round(share, 4) for share, _ in gens]
            run["after_compactions"] = [round(share, 4) for share in after_compactions(gens)]
            out[label] = run
        shares = out["cached"]["read_shares"][2:]
        out["min_share_from_turn_3"] = min(shares) if shares else 0.0
        out["cost_ratio"] = (out["cached"]["cost_usd"] or 0.0) / out["uncached"]["cost_usd"] \
            if out["uncached"]["cost_usd"] else None
        after = out["compacting"]["after_compactions"]
        out["after_compaction_share"] = min(after) if after else None
        log(f"cost pass: from turn 3 at least {100 * out['min_share_from_turn_3']:.0f}% read from cache; "
            f"cost {out['cached']['cost_usd']} vs {out['uncached']['cost_usd']} USD uncached; after a compaction "
            f"{out['after_compaction_share']} ({out['compacting']['compactions']} compactions)")
        return out
    finally:
        system.stop()
        fake.stop()


def main() -> int:
    servers = start_servers(sync_always=True)
    try:
        res = measure_cost(servers)
    finally:
        servers.stop()
    print(json.dumps({k: v for k, v in res.items() if k not in ("cached", "uncached", "compacting")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
