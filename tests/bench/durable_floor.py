"""The durable floor: the hops of one tool-turn with the durability loopwire pays for.

The raw floor (floor.py) makes each hop a core-NATS request/reply, which no loopwire
layout could survive a crash with. This one makes the same five hops the way the split
layout does, with nothing else: each hop is a JetStream work-queue message (`publish`
awaiting its PubAck, a push consumer with a deliver group, an explicit ack after the
hop's work), on a file-storage stream of a nats-server running `sync_interval: always`;
the events of each hop go into a JetStream stream (PubAcks awaited together, deduplicated
by `Nats-Msg-Id`; the ephemeral kinds published without waiting, as loopwire does); Redis is the bench's, with the append-only file (`appendonly yes`,
`appendfsync everysec`, as compose runs it). The Redis calls and events per hop are the
plan the trace counted (floor.py, `plan_from_trace`); the envelopes are of the sizes the
trace saw. Raw nats-py + redis-py + orjson: no FastStream, no pydantic, no logic.

A run is driven the way loopwire's is: the client publishes the first `memory.assemble`
hop; the responder hands each hop to the next through the stream, emits a `message`
event at the end of each generation and `run.ended` after the last. The latency of one
tool-turn is the time between two consecutive `message` events, as for loopwire.

    python -m tests.bench.durable_floor --nats URL --redis URL --plan JSON   # a responder
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import Any

import nats
import orjson
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig

from .driver import BenchDriver, SessionRun
from .floor import DEFAULT_PLAN, EPHEMERAL_KINDS, Hop, HopWork, padding, plan_from_json, plan_to_json, spawn

PREFIX = "dfloor"
WORK_STREAM = "DFLOOR_WORK"
EVENTS_STREAM = "DFLOOR_EVENTS"
STREAMS = (WORK_STREAM, EVENTS_STREAM)
TOOLS, MEMORY, ROUTER_OUT = 0, 2, 4
"""Hops of floor.DEFAULT_PLAN: a turn is tools, router, memory, llm, router."""


def work_subject(hop: int) -> str:
    return f"{PREFIX}.work.{hop}"


def durable(hop: int) -> str:
    return f"dfloor_hop{hop}"


async def ensure_streams(js: JetStreamContext, hops: int) -> None:
    """The floor's two streams and one durable push consumer per hop (as LOOPWIRE_WORK
    and LOOPWIRE_EVENTS, shared/runtime/streams.py: file storage, work queue and limits)."""
    await js.add_stream(StreamConfig(name=WORK_STREAM, subjects=[f"{PREFIX}.work.>"],
                                     retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
                                     duplicate_window=120))
    await js.add_stream(StreamConfig(name=EVENTS_STREAM, subjects=[f"{PREFIX}.out.>"],
                                     retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                                     duplicate_window=120))
    for hop in range(hops):
        await js.add_consumer(WORK_STREAM, ConsumerConfig(
            durable_name=durable(hop), filter_subject=work_subject(hop), ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, ack_wait=30, max_ack_pending=10_000,
            deliver_subject=f"{PREFIX}.deliver.{hop}", deliver_group=durable(hop)))


class DurableResponder:
    """Every hop of the plan, consumed from the work stream and handed on through it."""

    def __init__(self, nc: NatsClient, redis: aioredis.Redis, sizes: list[int],
                 plan: tuple[Hop, ...] = DEFAULT_PLAN) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.work = HopWork(redis, plan)
        self.plan = plan
        self.bodies = [padding(n) for n in sizes]
        """The envelope each hop receives (hop i publishes hop i+1's)."""
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for hop in range(len(self.plan)):
            await self.nc.subscribe(f"{PREFIX}.deliver.{hop}", queue=durable(hop),
                                    cb=spawn(self.handle, hop, self.tasks),
                                    pending_msgs_limit=-1, pending_bytes_limit=-1)

    async def handle(self, hop: int, msg: Msg) -> None:
        env = orjson.loads(msg.data)
        sid, turn, turns = env["session_id"], env["turn"], env["turns"]
        await self.work.run(hop, sid, turn)
        kinds = self.plan[hop].events_at(turn)
        nxt: int | None = (hop + 1) % len(self.plan)
        if hop == ROUTER_OUT:
            kinds = ["message"] + [k for k in kinds if k != "message"]
            if turn >= turns:  # the final answer: no tool call, the run ends
                kinds, nxt = ["message", "run.ended"], None
        acks = []
        for n, kind in enumerate(kinds):
            body = {"v": 1, "kind": kind, "session_id": sid, "turn": turn}
            if kind == "run.ended":
                body["status"] = "completed"
            subject = f"{PREFIX}.out.{sid}.{kind}"
            if kind in EPHEMERAL_KINDS:  # stored by the stream too, but nobody waits for it
                await self.nc.publish(subject, orjson.dumps(body))
            else:
                acks.append(await self.js.publish_async(subject, orjson.dumps(body),
                                                        headers={"Nats-Msg-Id": f"{sid}:{turn}:{hop}:{n}"}))
        if acks:
            await asyncio.gather(*acks)
        if nxt is not None:
            next_turn = turn + 1 if nxt == TOOLS else turn
            await self.js.publish(work_subject(nxt), envelope(sid, next_turn, turns, self.bodies[nxt]),
                                  headers={"Nats-Msg-Id": f"{sid}:{next_turn}:{nxt}"})
        await msg.ack()


def envelope(sid: str, turn: int, turns: int, messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"session_id": sid, "turn": turn, "turns": turns, "messages": messages})


class DurableFloorDriver(BenchDriver):
    """The bench's client (driver.py) on the floor's subjects: a run starts with a JetStream
    publish of its first memory hop, and is timed by its `message` events."""

    def __init__(self, nc: NatsClient, sizes: list[int]) -> None:
        super().__init__(nc, prefix=PREFIX)
        self.js = nc.jetstream()
        self.first = padding(sizes[MEMORY])

    async def publish_start(self, run: SessionRun, max_turns: int | None = None) -> None:
        run.started_at = time.perf_counter()
        await self.js.publish(work_subject(MEMORY), envelope(run.sid, 0, run.turns, self.first),
                              headers={"Nats-Msg-Id": f"{run.sid}:start"})


async def serve(nats_url: str, redis_url: str, sizes: list[int], plan: tuple[Hop, ...]) -> None:
    nc = await nats.connect(nats_url)
    redis = aioredis.Redis.from_url(redis_url, max_connections=512)
    responder = DurableResponder(nc, redis, sizes, plan)
    await responder.start()
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
    parser = argparse.ArgumentParser(description="a responder of the durable floor")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--sizes", default="335,446,1537,4631,446", help="bytes of each hop's envelope")
    parser.add_argument("--plan", default=plan_to_json(DEFAULT_PLAN), help="per-hop plan (JSON)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(args.nats, args.redis, [int(x) for x in args.sizes.split(",")], plan_from_json(args.plan)))


if __name__ == "__main__":
    main()
