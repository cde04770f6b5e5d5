"""The bench's client: starts bench sessions through the public contract and times them.

One wildcard subscription on `<prefix>.out.>` receives every event; the session id and
the kind come from the subject, so only `message` bodies (for their seq: an event that
comes twice counts once) and `run.ended` bodies are decoded. A tool-turn's latency is the
time between two consecutive `message` events of one session, as this client receives them: tool.call -> tools -> tool.result -> router -> memory -> llm ->
router -> message, the whole loop of one turn.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from loopwire.shared.contract import keys
from loopwire.shared.contract.subjects import Subjects


@dataclass
class SessionRun:
    sid: str
    turns: int
    messages: list[float] = field(default_factory=list)
    seen: set[Any] = field(default_factory=set)
    """The seqs of the `message` events received."""
    started_at: float = 0.0
    ended: asyncio.Future[dict[str, Any]] | None = None

    def intervals(self) -> list[float]:
        return [b - a for a, b in zip(self.messages, self.messages[1:], strict=False)]


@dataclass
class LoadResult:
    sessions: int
    turns_per_session: int
    wall_s: float
    latencies_s: list[float]
    failures: list[str]

    @property
    def tool_turns(self) -> int:
        return self.sessions * self.turns_per_session

    @property
    def turns_per_s(self) -> float:
        return self.tool_turns / self.wall_s if self.wall_s else 0.0


class BenchDriver:
    def __init__(self, nc: NatsClient, prefix: str = "loopwire", tool: str = "noop") -> None:
        self.nc = nc
        self.subjects = Subjects(prefix)
        self.tool = tool
        self._head = f"{prefix}.out."
        self._runs: dict[str, SessionRun] = {}
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self.subjects.events_all, cb=self._on_event,
                                            pending_msgs_limit=-1, pending_bytes_limit=-1)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _on_event(self, msg: Msg) -> None:
        now = time.perf_counter()
        sid, _, kind = msg.subject[len(self._head):].partition(".")
        run = self._runs.get(sid)
        if run is None:
            return
        if kind == "message":
            # An event may come twice (one republished after a lost PubAck): a client skips
            # the seqs it has seen, as the contract says. The floors' responders number
            # nothing: each of their events counts.
            seq = orjson.loads(msg.data).get("seq")
            if seq is None or seq not in run.seen:
                run.seen.add(seq)
                run.messages.append(now)
        elif kind == "run.ended" and run.ended is not None and not run.ended.done():
            run.ended.set_result(orjson.loads(msg.data))
        elif kind == "error":
            body = orjson.loads(msg.data)
            if body.get("run_id") is None and run.ended is not None and not run.ended.done():
                run.ended.set_result({"status": "rejected", "error": body})

    def new_run(self, tag: str, turns: int) -> SessionRun:
        sid = f"bench-{tag}-{uuid.uuid4().hex[:10]}"
        run = SessionRun(sid, turns, ended=asyncio.get_running_loop().create_future())
        self._runs[sid] = run
        return run

    async def publish_start(self, run: SessionRun, max_turns: int | None = None) -> None:
        body = {"v": 1, "input": f"bench:{run.turns}", "tools": [self.tool],
                "limits": {"max_turns": max_turns or max(run.turns + 5, 50)}}
        run.started_at = time.perf_counter()
        reply = await self.nc.request(self.subjects.ingress(run.sid, "start"), orjson.dumps(body),
                                      timeout=30, headers={"Nats-Msg-Id": f"{run.sid}:start"})
        ack = orjson.loads(reply.data)
        if "error" in ack:
            raise RuntimeError(f"ingress refused the start of {run.sid}: {ack}")

    async def run_one(self, tag: str, turns: int, timeout: float = 120.0,
                      max_turns: int | None = None) -> tuple[SessionRun, dict[str, Any]]:
        run = self.new_run(tag, turns)
        await self.publish_start(run, max_turns)
        assert run.ended is not None
        ended = await asyncio.wait_for(run.ended, timeout)
        self._runs.pop(run.sid, None)
        return run, ended

    async def run_load(self, tag: str, sessions: int, turns: int, timeout: float = 240.0) -> LoadResult:
        """`sessions` concurrent sessions of `turns` tool-turns; wall time from the first
        start published to the last run.ended received."""
        runs = [self.new_run(tag, turns) for _ in range(sessions)]
        t0 = time.perf_counter()
        await asyncio.gather(*(self.publish_start(r) for r in runs))
        done, pending = await asyncio.wait([r.ended for r in runs if r.ended is not None], timeout=timeout)
        wall = time.perf_counter() - t0
        failures: list[str] = []
        latencies: list[float] = []
        for r in runs:
            assert r.ended is not None
            if not r.ended.done():
                failures.append(f"{r.sid}: no run.ended within {timeout:.0f}s ({len(r.messages)} messages)")
                continue
            ended = r.ended.result()
            if ended.get("status") != "completed" or len(r.messages) != turns + 1:
                failures.append(f"{r.sid}: status {ended.get('status')}, {len(r.messages)} messages "
                                f"(expected {turns + 1})")
            latencies.extend(r.intervals())
            self._runs.pop(r.sid, None)
        for fut in pending:
            fut.cancel()
        return LoadResult(sessions, turns, wall, latencies, failures)

    async def run_sequential(self, tag: str, sessions: int, turns: int) -> LoadResult:
        """`sessions` sessions one after the other: the latency of an otherwise idle system."""
        t0 = time.perf_counter()
        latencies: list[float] = []
        failures: list[str] = []
        for _ in range(sessions):
            run, ended = await self.run_one(tag, turns)
            if ended.get("status") != "completed" or len(run.messages) != turns + 1:
                failures.append(f"{run.sid}: status {ended.get('status')}, {len(run.messages)} messages")
            latencies.extend(run.intervals())
        return LoadResult(sessions, turns, time.perf_counter() - t0, latencies, failures)


async def alternated(first: BenchDriver, second: BenchDriver, sessions: int,
                     turns: int) -> tuple[LoadResult, LoadResult]:
    """`sessions` sessions of each driver one at a time, the two taking turns (one of
    `first`, one of `second`, ...): the single-session latency of two systems on the same
    servers, each measured next to the other. This machine's speed drifts by a fifth and
    more within minutes, so two systems measured minutes apart compare that drift as much
    as themselves; sessions a tenth of a second apart do not."""
    runs: list[tuple[list[float], list[str]]] = [([], []), ([], [])]
    walls = [0.0, 0.0]
    for n in range(sessions):
        for i, driver in enumerate((first, second)):
            started = time.perf_counter()
            run, ended = await driver.run_one(f"single{n}", turns)
            walls[i] += time.perf_counter() - started
            if ended.get("status") != "completed" or len(run.messages) != turns + 1:
                runs[i][1].append(f"{run.sid}: status {ended.get('status')}, {len(run.messages)} messages")
            runs[i][0].extend(run.intervals())
    return (LoadResult(sessions, turns, walls[0], runs[0][0], runs[0][1]),
            LoadResult(sessions, turns, walls[1], runs[1][0], runs[1][1]))


async def warmed_up(nats_url: str, redis_url: str, *, cluster: bool = False,
                    tool_timeout_s: float = 30.0) -> BenchDriver:
    """A started driver on a connection of its own (`driver.nc`), once the layout offers
    `noop` (`wait_for_tool`) and has run the warm-up load (40 sessions × 5 tool-turns)."""
    await wait_for_tool(redis_url, "noop", timeout=tool_timeout_s, cluster=cluster)
    driver = BenchDriver(await nats.connect(servers=nats_url.split(",")))
    await driver.start()
    await driver.run_load("warm", 40, 5)
    return driver


async def wait_for_tool(redis_url: str, name: str, timeout: float = 30.0, *, cluster: bool = False) -> None:
    """Until the tools service has published `name` in the catalog the memory service
    reads (keys.TOOL_CATALOG), so no run starts before its tool is offered. `cluster`:
    `redis_url` names the nodes of a Redis Cluster."""
    from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis

    r = connect_redis(RedisTopology(redis_url, cluster=cluster))
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await r.hexists(keys.TOOL_CATALOG, name):
                return
            await asyncio.sleep(0.1)
    finally:
        await r.aclose()
    raise TimeoutError(f"tool {name!r} not in {keys.TOOL_CATALOG} after {timeout}s")
