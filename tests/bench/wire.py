"""What a load run cost on the wire, counted by the servers themselves.

Read before and after each load run, divided by its tool-turns:

- nats-server's `/varz` (its monitoring port, which the bench's server is started with):
  messages and bytes it received and sent, every kind (work, deliveries, acks, PubAcks,
  events, requests); on a NATS cluster summed over the nodes, so a message routed from one
  node to another counts at both;
- the JetStream streams' `last_seq`: messages stored in each stream (work hops, events,
  ingress) — a work-queue stream deletes what was acked, but its sequence still counts;
- Redis `INFO stats` and `INFO commandstats`: commands processed (those run by Lua scripts
  included, as Redis counts them), script calls, and read events (one per request or
  pipeline a client sent, so close to the round trips).

The trace (trace.py) sees the same at one session with MONITOR and a `>` subscription, by
command and message class; these are the totals under the full load.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient


@dataclass
class Snapshot:
    nats: dict[str, float] = field(default_factory=dict)
    streams: dict[str, float] = field(default_factory=dict)
    redis: dict[str, float] = field(default_factory=dict)
    commands: dict[str, float] = field(default_factory=dict)


def varz(monitor_urls: list[str]) -> dict[str, float]:
    """The counts of `/varz`, summed over the servers (the nodes of a NATS cluster)."""
    out: dict[str, float] = {}
    for url in monitor_urls:
        with urllib.request.urlopen(f"{url}/varz", timeout=5) as resp:
            data = json.load(resp)
        for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"):
            out[k] = out.get(k, 0.0) + float(data.get(k, 0))
    return out


async def stream_seqs(nc: NatsClient, streams: tuple[str, ...]) -> dict[str, float]:
    js = nc.jetstream()
    out: dict[str, float] = {}
    for name in streams:
        try:
            info = await js.stream_info(name)
        except Exception:  # not (yet) created in this run
            continue
        out[name] = float(info.state.last_seq)
    return out


async def redis_stats(servers: list[aioredis.Redis]) -> tuple[dict[str, float], dict[str, float]]:
    """Summed over `servers` (the one Redis, or every master of a cluster)."""
    keep = ("total_commands_processed", "total_reads_processed", "total_net_input_bytes")
    totals: dict[str, float] = dict.fromkeys(keep, 0.0)
    commands: dict[str, float] = {}
    for r in servers:
        stats = await r.info("stats")
        for k in keep:
            totals[k] += float(stats.get(k, 0))
        for k, v in (await r.info("commandstats")).items():
            if isinstance(v, dict):
                name = k.removeprefix("cmdstat_")
                commands[name] = commands.get(name, 0.0) + float(v["calls"])
    return totals, commands


async def snapshot(nc: NatsClient, rs: list[aioredis.Redis], monitor_urls: list[str],
                   streams: tuple[str, ...]) -> Snapshot:
    redis, commands = await redis_stats(rs)
    return Snapshot(varz(monitor_urls), await stream_seqs(nc, streams), redis, commands)


def per_turn(before: Snapshot, after: Snapshot, turns: int, stream_labels: dict[str, str]) -> dict[str, Any]:
    """The deltas of a run per tool-turn, as plain numbers for the results file."""
    def delta(a: dict[str, float], b: dict[str, float], key: str) -> float:
        return (b.get(key, 0.0) - a.get(key, 0.0)) / turns if turns else 0.0

    out: dict[str, Any] = {}
    if after.nats:
        out["nats_in_msgs"] = delta(before.nats, after.nats, "in_msgs")
        out["nats_out_msgs"] = delta(before.nats, after.nats, "out_msgs")
        out["nats_in_bytes"] = delta(before.nats, after.nats, "in_bytes")
    out["stored"] = {label: delta(before.streams, after.streams, name) for name, label in stream_labels.items()
                     if name in after.streams}
    out["redis_commands"] = delta(before.redis, after.redis, "total_commands_processed")
    out["redis_reads"] = delta(before.redis, after.redis, "total_reads_processed")
    scripts = sum(delta(before.commands, after.commands, k) for k in ("eval", "evalsha", "fcall"))
    out["redis_scripts"] = scripts
    by_cmd = {k: delta(before.commands, after.commands, k) for k in after.commands}
    # The bench's own reads (INFO, stream info) are a handful per run, not per turn.
    out["redis_by_command"] = {k: round(v, 2) for k, v in sorted(by_cmd.items(), key=lambda kv: -kv[1])
                               if v >= 0.01 and k not in ("info", "ping", "client", "hello", "select")}
    return out
