"""What a fork costs: `loopwire.api.session.fork` of a session of 1,000 events, answered by
a router of the running layout on one Redis, p50 and p99 over FORKS forks.

The session is written into Redis as the router leaves one (its state, its history and
its transcript, made by driving the router's own core, tests/router_driver.py): runs of
five tool-turns until the transcript holds EVENTS events. Each fork is one request of the
contract (NATS request/reply), at the session's last event: the whole transcript read and
replayed, the whole history written into the fork's keys, its first event published.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import nats
import orjson

from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.shared.stores.session_store import RedisSessionStore
from tests.router_driver import Recorder, call

EVENTS = 1000
FORKS = 20
TURNS_PER_RUN = 5


def long_session(sid: str, events: int = EVENTS) -> Recorder:
    """A session of at least `events` events: runs of TURNS_PER_RUN tool-turns, each with a
    call of its own input (no loop for the loop detector to find)."""
    d = Recorder(sid=sid)
    n = 0
    d.start(input="Add the numbers one by one.")
    while True:
        for _ in range(TURNS_PER_RUN):
            n += 1
            d.answer(f"Adding {n}.", call(f"t{n}", inp={"a": n, "b": 1}))
            d.tools(str(n + 1))
        d.answer(f"Done up to {n}.")
        if len(d.transcript) >= events:
            return d
        d.message("And the next ones.")


async def seed(redis_url: str, d: Recorder) -> None:
    redis = connect_redis(redis_url)
    try:
        sid = d.state.session_id
        assert await RedisSessionStore(redis).commit(sid, 0, d.state.dump(), history_len_before=0, append=d.history)
        log = RedisEventLog(redis)
        for start in range(0, len(d.transcript), 200):
            await log.append_many(sid, [(e, None, True) for e in d.transcript[start:start + 200]])
    finally:
        await redis.aclose()


async def measure_fork(nats_url: str, redis_url: str, forks: int = FORKS) -> dict[str, Any]:
    source = f"bench-fork-{uuid.uuid4().hex[:8]}"
    d = long_session(source)
    await seed(redis_url, d)
    nc = await nats.connect(servers=nats_url.split(","))
    times: list[float] = []
    messages = 0
    try:
        for n in range(forks + 1):
            body = orjson.dumps({"session_id": source, "new_session_id": f"{source}-f{n}"})
            t0 = time.perf_counter()
            reply = orjson.loads((await nc.request("loopwire.api.session.fork", body, timeout=30)).data)
            elapsed = time.perf_counter() - t0
            if "error" in reply:
                raise RuntimeError(f"the fork was refused: {reply['error']}")
            messages = reply["messages"]
            if n:  # the first warms the router's connections up
                times.append(elapsed)
    finally:
        await nc.drain()
    times.sort()
    return {"events": len(d.transcript), "messages": messages, "forks": len(times),
            "p50_ms": 1000 * times[len(times) // 2], "p99_ms": 1000 * times[min(len(times) - 1,
                                                                              round(0.99 * (len(times) - 1)))]}
