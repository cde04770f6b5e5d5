"""A work consumer's drain (shared/runtime/work_consumer.py, `stop`), over a real
nats-server: the messages it had taken but not started, and a handler still running at
the drain's end, go back to the stream with no delay, so another replica of the same
durable consumer takes them at once instead of after ack_wait."""

from __future__ import annotations

import asyncio
import time

import nats
from nats.js.api import ConsumerConfig, StreamConfig

from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer

ACK_WAIT_S = 30


async def test_a_drain_hands_back_what_it_holds_to_the_other_replica_at_once(nc: nats.NATS, prefix: str) -> None:
    js = nc.jetstream()
    stream = f"{prefix.upper()}_DRAIN"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.work.>"]))
    config = ConsumerConfig(deliver_subject=f"{prefix}.deliver.d", ack_wait=ACK_WAIT_S)
    started = asyncio.Event()
    cancelled: list[bytes] = []
    taken_by_other: dict[bytes, float] = {}
    all_there = asyncio.Event()

    async def stuck(root: JetStreamRoot) -> None:  # the replica that drains: a handler that never ends
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(root.body)
            raise

    async def other(root: JetStreamRoot) -> None:
        taken_by_other[root.body] = time.monotonic()
        await root.ack()
        if len(taken_by_other) == 3:
            all_there.set()

    draining = WorkConsumer(f"{prefix}.work.d", stream=stream, durable=f"{prefix}_d", config=config,
                            handle=stuck, max_workers=1)
    await draining.start(js)
    for n in range(3):
        await js.publish(f"{prefix}.work.d", b"%d" % n)
    await asyncio.wait_for(started.wait(), 5)
    for _ in range(50):
        if len(draining._waiting) == 2:
            break
        await asyncio.sleep(0.02)
    assert draining.in_flight == 1 and len(draining._waiting) == 2, "one running, two taken and waiting"
    replacement = WorkConsumer(f"{prefix}.work.d", stream=stream, durable=f"{prefix}_d", config=config,
                               handle=other, max_workers=4)
    await replacement.start(js)
    try:
        began = time.monotonic()
        await draining.stop(0.5)
        stopped = time.monotonic()
        assert stopped - began < 3.5, "the drain's timeout, then the cancelled handler's cleanup"
        assert cancelled == [b"0"], "the handler still running at the drain's end was cancelled"
        await asyncio.wait_for(all_there.wait(), 10)
        assert sorted(taken_by_other) == [b"0", b"1", b"2"]
        assert max(taken_by_other.values()) - began < 5 < ACK_WAIT_S, "handed back at once, not after ack_wait"
    finally:
        await replacement.stop(1)
