"""The floor: the NATS hops and Redis round trips of one tool-turn, with nothing else.

Raw nats-py request/reply, redis-py (asyncio) and orjson, no JetStream, no FastStream,
no pydantic, no logic. One tool-turn of loopwire is five service hops (tools, router,
memory, llm, router: see docs/architecture.md); here each hop is one core-NATS request
from the driver to an echo responder in another process, which first makes the Redis
calls that loopwire's receiving service makes (same commands, scripts of the same shape,
keys of the same shape) and publishes the events that service emits (fire-and-forget).

    python -m tests.bench.floor --nats URL --redis URL --plan JSON   # the responder

The plan comes from what the trace counted loopwire doing per tool-turn
(`plan_from_trace`), so the floor follows the code; `DEFAULT_PLAN` is the path of
docs/architecture.md, used when there is no trace.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import nats
import orjson
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from .driver import LoadResult


@dataclass(frozen=True)
class Hop:
    service: str
    redis: tuple[str, ...]
    """Redis round trips, in order: `mget`, `set_tool`, `event`, `hmget`, `commit`, `lrange`,
    `hgetall`, `get_gen`, `set_gen`, `claim` (a step's claim, then its records under it),
    `lua` (another small script), `get` (anything else)."""
    events: tuple[str, ...] = ()
    occasional: tuple[tuple[str, int], ...] = ()
    """(kind, every N tool-turns): an event of fewer than one per tool-turn (memory's
    observations), published at the turns that are multiples of N."""
    per_run: tuple[str, ...] = ()
    """Events once per run, at its first tool-turn (`run.started`, its `phase.changed`s...):
    the run's own beyond its tool-turns and the final answer's `generating`, `message` and
    `run.ended`, which the durable floor publishes for its final answer."""

    def events_at(self, turn: int) -> list[str]:
        """What this hop publishes at tool-turn `turn` (1-based) of a run."""
        kinds = list(self.events) + [kind for kind, every in self.occasional if turn % every == 0]
        return kinds + list(self.per_run) if turn == 1 else kinds


FLOOR_END_EVENTS = ("generating", "message", "run.ended")
"""What the durable floor publishes once per run for its final answer (durable_floor.py):
the generation's, then the answer and the end."""


DEFAULT_PLAN: tuple[Hop, ...] = (
    Hop("tools", ("mget", "set_tool", "event"), ("tool.result",)),
    Hop("router", ("hmget", "commit")),
    Hop("memory", ("lrange", "hgetall")),
    Hop("llm", ("get_gen", "set_gen")),
    Hop("router", ("hmget", "commit", "event", "event"), ("message", "tool.call")),
)
ROUTER_IN, ROUTER_OUT = 1, 4
"""The router's two hops: the tools result in, the generation result in."""
OP_OF = {
    "mget lw:step:tool": ("mget", 0), "set lw:step:tool": ("set_tool", 0),
    "lrange lw:h": ("lrange", 2), "hgetall lw:tools": ("hgetall", 2),
    "get lw:step:gen": ("get_gen", 3), "set lw:step:gen": ("set_gen", 3),
    "evalsha lw:claim:gen": ("claim", 3), "evalsha lw:claim:tools": ("claim", 0),
}
"""Trace label -> (floor op, hop of the service that makes the call)."""
HOP_OF_KEYSPACE = {"lw:step:tool": 0, "lw:h": 2, "lw:tools": 2, "lw:mem": 2, "lw:step:gen": 3, "lw:breaker": 3}
"""Any other command on these key spaces: the service that owns them."""
EVENT_HOP = {"tools.progress": ROUTER_IN, "tool.result": ROUTER_IN, "user.message": ROUTER_IN,
             "memory.observation": 2, "generating": 3}
"""Who publishes each event kind of a tool-turn (a single call's `tool.result` and
`tools.progress` go out with the router's transition); any other kind: the router, after
the generation."""
EPHEMERAL_KINDS = frozenset({"text.delta", "generating", "tools.progress"})
"""Published without waiting for a PubAck, as loopwire publishes them (shared/contract/protocol.py)."""


def plan_from_trace(redis_cmds: dict[str, float], events: dict[str, float],
                    run_events: dict[str, float] | None = None) -> tuple[Hop, ...]:
    """The per-hop plan for what the trace counted per tool-turn: Redis commands by key
    space (`hmget lw:s`...) and events by kind (`tool.result`...). Counts are averages
    (some work happens every few turns), so each hop gets its whole-number share, and
    the fractions of a hop add up to plain round trips (`get`). An event's fraction is
    published every so many turns, and `run_events` (per run, beyond its tool-turns) once
    per run: the floor stores as many events as loopwire does, which is what bounds
    both under an fsync per stored message."""
    ops: list[list[str]] = [[] for _ in DEFAULT_PLAN]
    spare = [0.0 for _ in DEFAULT_PLAN]

    def add(hop: int, op: str, count: float) -> None:
        ops[hop] += [op] * int(count)
        spare[hop] += count - int(count)

    for label, count in sorted(redis_cmds.items()):
        name, _, space = label.partition(" ")
        if label in OP_OF:
            op, hop = OP_OF[label]
            add(hop, op, count)
        elif label in ("hmget lw:s", "evalsha lw:s"):  # the router loads, then commits
            op = "hmget" if name == "hmget" else "commit"
            add(ROUTER_IN, op, count / 2)
            add(ROUTER_OUT, op, count / 2)
        elif label == "evalsha lw:seq":  # an event stored outside a router commit
            generating = min(count, events.get("generating", 0))  # the llm's, as a generation starts
            add(3, "event", generating)
            add(ROUTER_OUT, "event", count - generating)
        else:
            add(HOP_OF_KEYSPACE.get(space, ROUTER_OUT), "lua" if name.startswith("eval") else "get", count)
    for hop, extra in enumerate(spare):
        ops[hop] += ["get"] * round(extra)
    order = ["hmget", "mget", "get_gen", "get", "lua", "lrange", "hgetall", "commit", "claim", "set_tool", "set_gen",
             "event"]
    hop_events: list[list[str]] = [[] for _ in DEFAULT_PLAN]
    occasional: list[list[tuple[str, int]]] = [[] for _ in DEFAULT_PLAN]
    for kind, count in sorted(events.items()):
        hop = EVENT_HOP.get(kind, ROUTER_OUT)
        whole, part = int(count + 0.05), count - int(count + 0.05)
        hop_events[hop] += [kind] * whole
        if part >= 0.05:
            occasional[hop].append((kind, round(1 / part)))
    per_run = list((Counter({k: round(v) for k, v in (run_events or {}).items()}) - Counter(FLOOR_END_EVENTS)).elements())
    return tuple(Hop(h.service, tuple(sorted(ops[i], key=order.index)), tuple(hop_events[i]), tuple(occasional[i]),
                     tuple(sorted(per_run)) if i == ROUTER_OUT else ())
                 for i, h in enumerate(DEFAULT_PLAN))


def plan_to_json(plan: tuple[Hop, ...]) -> str:
    return orjson.dumps([{"service": h.service, "redis": h.redis, "events": h.events, "occasional": h.occasional,
                          "per_run": h.per_run} for h in plan]).decode()


def plan_from_json(text: str) -> tuple[Hop, ...]:
    return tuple(Hop(h["service"], tuple(h["redis"]), tuple(h["events"]),
                     tuple((kind, every) for kind, every in h.get("occasional", ())), tuple(h.get("per_run", ())))
                 for h in orjson.loads(text))


SUBJECT = "floor.hop"
EVENTS = "floor.out"

# The scripts loopwire runs, trimmed to their Redis work: compare-version-and-set of the
# state plus the history append (session_store.py), seq + dedup key + stream entry
# (event_log.py), and a read-modify-write of a small hash (the llm's breaker, for `lua`).
COMMIT_LUA = """
local cur = redis.call('HGET', KEYS[1], 'ver')
if (cur or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'ver', ARGV[2], 'state', ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[4])
return 1
"""
SMALL_LUA = """
local f = redis.call('HGET', KEYS[1], 'failures')
redis.call('HSET', KEYS[1], 'failures', 0, 'seen', ARGV[1])
return f
"""
CLAIM_LUA = """
local records = redis.call('MGET', KEYS[3])
if records[1] then return {0, records} end
if redis.call('GET', KEYS[1]) then return {2} end
local fence = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], 3600)
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence, 'PX', 30000)
return {1, records, fence}
"""
RECORD_LUA = """
if redis.call('GET', KEYS[2]) then return {0} end
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return {2} end
redis.call('SET', KEYS[2], ARGV[2], 'EX', 3600)
return {1}
"""
EVENT_LUA = """
local seq = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], seq)
redis.call('XADD', KEYS[3], seq .. '-0', 'e', ARGV[2])
return seq
"""


def padding(size: int) -> list[dict[str, Any]]:
    """Message-shaped JSON of about `size` bytes (orjson cost grows with structure, not
    only with bytes, so the envelopes are not one long string)."""
    block = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0123456789abcdef0123",
                                          "content": "ok"}]}
    one = len(orjson.dumps(block)) + 1
    return [block] * max(1, size // one)


class HopWork:
    """What one hop's service does in Redis, by the plan: the same commands, scripts of
    the same shape and keys of the same shape as loopwire's (both floors use it)."""

    def __init__(self, redis: aioredis.Redis, plan: tuple[Hop, ...] = DEFAULT_PLAN) -> None:
        self.r = redis
        self.plan = plan
        self.commit = redis.register_script(COMMIT_LUA)
        self.event = redis.register_script(EVENT_LUA)
        self.small = redis.register_script(SMALL_LUA)
        self.claim = redis.register_script(CLAIM_LUA)
        self.record = redis.register_script(RECORD_LUA)
        self.state = orjson.dumps({"status": "running", "run": {"turn": 1, "phase": "generate"},
                                   "history_len": 2, "pad": padding(600)})

    async def run(self, hop: int, sid: str, turn: int) -> None:
        n_event = n_claim = 0
        ver = 0
        for op in self.plan[hop].redis:
            if op == "hmget":  # the router's load: the version its commit compares
                raw_ver, _state = await self.r.hmget(f"fl:s:{sid}", ["ver", "state"])
                ver = int(raw_ver or 0)
            elif op == "commit":
                await self.commit(keys=[f"fl:s:{sid}", f"fl:h:{sid}"],
                                  args=[str(ver), str(ver + 1), self.state, b'{"role":"user","content":"ok"}'])
            elif op == "event":
                await self.event(keys=[f"fl:seq:{sid}", f"fl:ek:{sid}", f"fl:e:{sid}"],
                                 args=[f"{turn}:{hop}:{n_event}", b'{"v":1,"kind":"event","turn":1}'])
                n_event += 1
            elif op == "claim":  # the step's claim first, then its records under the claim
                claim, step = f"fl:claim:{sid}:{turn}:{hop}", f"fl:step:{sid}:{turn}:{hop}:{n_claim}"
                if n_claim == 0:
                    await self.claim(keys=[claim, f"fl:fence:{sid}:{turn}:{hop}", step], args=["owner"])
                else:
                    await self.record(keys=[claim, step], args=["owner|1", b'{"content":"ok","is_error":false}'])
                n_claim += 1
            else:
                await self._redis(op, sid, turn)

    async def _redis(self, op: str, sid: str, turn: int) -> None:
        r = self.r
        if op == "mget":
            await r.mget([f"fl:step:tool:{sid}:{turn}"])
        elif op == "set_tool":
            await r.set(f"fl:step:tool:{sid}:{turn}", b'{"content":"ok","is_error":false}', ex=3600)
        elif op == "lrange":
            await r.lrange(f"fl:h:{sid}", 0, -1)
        elif op == "hgetall":
            await r.hgetall("fl:tools:catalog")
        elif op == "lua":
            await self.small(keys=["fl:breaker:model"], args=[str(turn)])
        elif op == "get":
            await r.get(f"fl:other:{sid}")
        elif op == "get_gen":
            await r.get(f"fl:step:gen:{sid}:{turn}")
        elif op == "set_gen":
            await r.set(f"fl:step:gen:{sid}:{turn}", self.state, ex=3600, nx=True)
        else:
            raise ValueError(op)


class Responder:
    """The raw floor's echo responder: one core-NATS request per hop."""

    def __init__(self, nc: NatsClient, redis: aioredis.Redis, reply_sizes: list[int],
                 plan: tuple[Hop, ...] = DEFAULT_PLAN) -> None:
        self.nc = nc
        self.work = HopWork(redis, plan)
        self.plan = plan
        self.replies = [padding(n) for n in reply_sizes]
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for i in range(len(self.plan)):
            await self.nc.subscribe(f"{SUBJECT}.{i}", queue="floor", cb=spawn(self.handle, i, self.tasks))

    async def handle(self, hop: int, msg: Msg) -> None:
        env = orjson.loads(msg.data)
        sid, turn = env["session_id"], env["turn"]
        await self.work.run(hop, sid, turn)
        for kind in self.plan[hop].events_at(turn):
            await self.nc.publish(f"{EVENTS}.{sid}.{kind}", orjson.dumps({"v": 1, "kind": kind, "turn": turn}))
        await msg.respond(orjson.dumps({"session_id": sid, "turn": turn, "messages": self.replies[hop]}))


def spawn(handle: Any, hop: int, tasks: set[asyncio.Task[None]]) -> Any:
    """A subscription callback that runs `handle(hop, msg)` in its own task (nats-py runs
    one subscription's callbacks one at a time)."""
    async def cb(msg: Msg) -> None:
        task = asyncio.create_task(handle(hop, msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return cb


# -- the driver (runs in the bench process) -------------------------------------------------
class FloorDriver:
    def __init__(self, nc: NatsClient, request_sizes: list[int]) -> None:
        self.nc = nc
        self.requests = [padding(n) for n in request_sizes]
        self.events = 0
        self._sub: Any = None

    async def start(self) -> None:
        async def on_event(msg: Msg) -> None:
            self.events += 1

        self._sub = await self.nc.subscribe(f"{EVENTS}.>", cb=on_event, pending_msgs_limit=-1,
                                            pending_bytes_limit=-1)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def session(self, sid: str, turns: int) -> list[float]:
        """`turns` tool-turns of five request/reply hops each; returns each turn's time."""
        out = []
        for turn in range(turns):
            t0 = time.perf_counter()
            for hop in range(len(self.requests)):
                body = orjson.dumps({"session_id": sid, "turn": turn, "messages": self.requests[hop]})
                reply = await self.nc.request(f"{SUBJECT}.{hop}", body, timeout=30)
                orjson.loads(reply.data)
            out.append(time.perf_counter() - t0)
        return out

    async def run_sequential(self, sessions: int, turns: int) -> LoadResult:
        t0 = time.perf_counter()
        lat: list[float] = []
        for i in range(sessions):
            lat.extend(await self.session(f"single{i}-{time.monotonic_ns()}", turns))
        return LoadResult(sessions, turns, time.perf_counter() - t0, lat, [])

    async def run_load(self, sessions: int, turns: int) -> LoadResult:
        t0 = time.perf_counter()
        tag = time.monotonic_ns()
        results = await asyncio.gather(*(self.session(f"load{i}-{tag}", turns) for i in range(sessions)))
        wall = time.perf_counter() - t0
        return LoadResult(sessions, turns, wall, [x for r in results for x in r], [])


def summary(lat: list[float]) -> tuple[float, float]:
    return statistics.median(lat), statistics.quantiles(lat, n=100)[98]


async def serve(nats_url: str, redis_url: str, reply_sizes: list[int], plan: tuple[Hop, ...]) -> None:
    nc = await nats.connect(nats_url)
    redis = aioredis.Redis.from_url(redis_url, max_connections=512)
    responder = Responder(nc, redis, reply_sizes, plan)
    await responder.start()
    await redis.hset("fl:tools:catalog", mapping={"noop": orjson.dumps({"name": "noop", "seen_at": 0})})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await nc.flush()
    print("ready", flush=True)
    await stop.wait()
    await nc.drain()
    await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description="the floor's echo responder")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--reply-sizes", default="700,650,4000,1400,500",
                        help="bytes of the reply of each hop (the next envelope)")
    parser.add_argument("--plan", default=plan_to_json(DEFAULT_PLAN), help="per-hop plan (JSON)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(args.nats, args.redis, [int(x) for x in args.reply_sizes.split(",")],
                      plan_from_json(args.plan)))


if __name__ == "__main__":
    main()
