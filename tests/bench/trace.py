"""Hop accounting: what loopwire does on NATS and Redis for one tool-turn, counted.

A wildcard NATS subscription (`>`) sees every message in the account (work publishes,
events, JetStream deliveries, acks and publish acknowledgements) and Redis MONITOR
sees every command (with the commands Lua scripts run marked `lua`). Two sessions run
one after the other, of `short` and `long` tool-turns (1 and 21); the difference divided by
`long - short` is what one more tool-turn costs, free of the per-run constants (start,
run.started, the final answer, run.ended).

Tool discovery runs in the background every few seconds ($SRV.INFO on NATS, HGETALL +
HSET of `lw:tools:catalog` on Redis); its traffic is left out.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import nats
import redis.asyncio as aioredis
from nats.aio.msg import Msg

from loopwire.shared.contract import keys

from .driver import BenchDriver


@dataclass
class Window:
    nats_msgs: Counter[str] = field(default_factory=Counter)
    nats_bytes: Counter[str] = field(default_factory=Counter)
    redis_cmds: Counter[str] = field(default_factory=Counter)
    lua_cmds: Counter[str] = field(default_factory=Counter)
    seen: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, kind, detail) of every NATS message, for the timeline."""


@dataclass
class TurnCost:
    """Per tool-turn: NATS messages and bytes by class, Redis round trips by command."""

    nats_msgs: dict[str, float]
    nats_bytes: dict[str, float]
    redis_cmds: dict[str, float]
    lua_cmds: dict[str, float]
    timeline: list[tuple[float, str]] = field(default_factory=list)
    """One tool-turn in the middle of the long session, from its `message` event to the
    next: (ms since the first, what happened on the wire)."""
    run_events: dict[str, float] = field(default_factory=dict)
    """Events per run beyond its tool-turns, by kind (`run.started`, the final `message`,
    `run.ended`...): the short session's count less its tool-turn's."""

    @property
    def work_hops(self) -> float:
        return sum(v for k, v in self.nats_msgs.items() if k.startswith("work publish"))

    @property
    def events(self) -> float:
        return sum(v for k, v in self.nats_msgs.items() if k.startswith("event "))

    @property
    def redis_round_trips(self) -> float:
        return sum(self.redis_cmds.values())


CONNECTION_COMMANDS = frozenset({"monitor", "hello", "client", "ping", "select", "auth", "info"})


def key_space(key: str) -> str:
    """`lw:step:gen:{<sid>}:<id>` -> `lw:step:gen`, `lw:claim:tools:{<sid>}:<id>` ->
    `lw:claim:tools`, `lw:s:{<sid>}` -> `lw:s` (shared/contract/keys.py)."""
    if not key.startswith("lw:"):
        return ""
    parts = key.split(":")
    return ":".join(parts[:3] if len(parts) > 2 and parts[1] in ("step", "claim", "fence") else parts[:2])


def classify(msg: Msg, prefix: str) -> str | None:
    subject = msg.subject
    if subject.startswith("$SRV."):
        return None  # tool discovery
    if msg.reply.startswith("$JS.ACK."):
        # A push consumer's delivery carries the original subject and an ack reply subject.
        return "jetstream delivery"
    if subject.startswith(f"{prefix}.work."):
        return f"work publish {subject[len(prefix) + 6:]}"
    if subject.startswith(f"{prefix}.out."):
        return f"event {subject.split('.', 3)[3]}"
    if subject.startswith(f"{prefix}.in."):
        return "ingress publish"
    if subject.startswith("$JS.ACK."):
        return "consumer ack" if msg.data in (b"", b"+ACK") else f"consumer {msg.data[:8].decode(errors='replace')}"
    if subject.startswith("$JS.API."):
        return "jetstream api"
    if subject.startswith("_INBOX."):
        return "reply (publish ack)"
    return f"other {subject.split('.', 1)[0]}"


async def trace_turns(nats_url: str, redis_url: str, prefix: str = "loopwire",
                      short: int = 1, long: int = 21) -> TurnCost:
    # One server's URL, or a cluster's comma-joined: the spy's `>` sees the client
    # traffic of every node (interest crosses the routes), not the replication inside it.
    spy = await nats.connect(servers=nats_url.split(","))
    client = await nats.connect(servers=nats_url.split(","))
    redis = aioredis.Redis.from_url(redis_url)
    driver = BenchDriver(client, prefix)
    await driver.start()
    windows: list[tuple[float, float, Window]] = []
    current: list[Window | None] = [None]

    async def on_msg(msg: Msg) -> None:
        window = current[0]
        kind = classify(msg, prefix)
        if window is None or kind is None:
            return
        window.nats_msgs[kind] += 1
        window.nats_bytes[kind] += len(msg.data)
        if kind == "jetstream delivery":
            detail = f"{msg.subject} ({len(msg.data)} B)"
        elif kind.startswith("consumer"):
            detail = f"of the {msg.subject.split('.')[3]} consumer's previous delivery"
        else:
            detail = f"({len(msg.data)} B)"
        window.seen.append((time.time(), kind, detail))

    await spy.subscribe(">", cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    monitor_cmds: list[dict[str, Any]] = []
    monitor_ready = asyncio.Event()

    async def monitor() -> None:
        async with redis.monitor() as m:
            monitor_ready.set()
            async for info in m.listen():
                monitor_cmds.append(info)

    mon_task = asyncio.create_task(monitor())
    await monitor_ready.wait()
    try:
        await driver.run_one("trace-warmup", 1)  # scripts loaded, consumers warm
        for turns in (short, long):
            window = Window()
            await asyncio.sleep(0.2)  # let the previous run's trailing acks pass
            current[0] = window
            t0 = time.time()
            await driver.run_one("trace", turns)
            await asyncio.sleep(0.2)  # the last acks after run.ended
            current[0] = None
            windows.append((t0, time.time(), window))
        await asyncio.sleep(0.2)
    finally:
        mon_task.cancel()
        await asyncio.gather(mon_task, return_exceptions=True)
        await driver.stop()
        await spy.drain()
        await client.drain()
        await redis.aclose()

    redis_seen: list[tuple[float, str]] = []
    for t0, t1, window in windows:
        catalog_writes = 0
        for info in monitor_cmds:
            if not t0 <= info["time"] <= t1:
                continue
            parts = info["command"].split(" ", 4)
            name = parts[0].lower()
            key_at = 3 if name in ("evalsha", "eval") else 1
            key = parts[key_at] if len(parts) > key_at else ""
            if info["client_type"] == "lua":
                window.lua_cmds[name] += 1
                continue
            if name in CONNECTION_COMMANDS:
                continue  # a new connection's handshake, not the turn's work
            if name == "hset" and key == keys.TOOL_CATALOG:
                catalog_writes += 1  # a discovery round: HGETALL then HSET
                continue
            window.redis_cmds[f"{name} {key_space(key)}".strip()] += 1
            redis_seen.append((info["time"], f"Redis {name} {key_space(key)}".strip()))
        if catalog_writes:
            window.redis_cmds["hgetall lw:tools"] -= catalog_writes

    (_, _, a), (_, _, b) = windows
    n = long - short

    def per_turn(x: Counter[str], y: Counter[str]) -> dict[str, float]:
        keys = sorted(set(x) | set(y))
        return {k: round((y[k] - x[k]) / n, 2) for k in keys if y[k] - x[k]}

    msgs = per_turn(a.nats_msgs, b.nats_msgs)
    run_events = {k.removeprefix("event "): round(a.nats_msgs[k] - short * msgs.get(k, 0.0), 2)
                  for k in a.nats_msgs if k.startswith("event ")}
    return TurnCost(msgs, per_turn(a.nats_bytes, b.nats_bytes),
                    per_turn(a.redis_cmds, b.redis_cmds), per_turn(a.lua_cmds, b.lua_cmds),
                    timeline(b, redis_seen, long // 2), {k: v for k, v in run_events.items() if v >= 0.5})


def timeline(window: Window, redis_seen: list[tuple[float, str]], turn: int) -> list[tuple[float, str]]:
    """Everything seen on the wire between the `turn`-th `message` event and the next."""
    marks = [t for t, kind, _ in window.seen if kind == "event message"]
    if len(marks) <= turn + 1:
        return []
    t0, t1 = marks[turn], marks[turn + 1]
    rows = [(t, f"NATS {kind} {detail}".strip()) for t, kind, detail in window.seen if t0 <= t <= t1]
    rows += [(t, what) for t, what in redis_seen if t0 <= t <= t1]
    return [(round((t - t0) * 1000, 3), what) for t, what in sorted(rows)]
