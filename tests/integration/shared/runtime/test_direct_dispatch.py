"""Messages handed to a plain function as nats-py reads them (shared/runtime/direct_dispatch.py),
over a real nats-server: in order, nothing left pending, a JetStream push subscription
too, a work consumer that never runs more than its handlers' limit, and a subscription
that unsubscribes, drains and closes as nats-py's own does."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, StreamConfig

from loopwire.shared.runtime.direct_dispatch import dispatch_directly
from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer


async def never(msg: Msg) -> None:
    raise AssertionError("nats-py's callback ran: its queue was not replaced")


async def test_messages_reach_the_function_in_order_and_nothing_waits(nc: nats.NATS, prefix: str) -> None:
    got: list[bytes] = []
    sub = await nc.subscribe(f"{prefix}.d", cb=never)
    assert dispatch_directly(sub, lambda msg: got.append(msg.data)) is True
    for n in range(200):
        await nc.publish(f"{prefix}.d", b"%d" % n)
    await nc.flush()
    for _ in range(50):
        if len(got) == 200:
            break
        await asyncio.sleep(0.02)
    assert got == [b"%d" % n for n in range(200)]
    assert sub.pending_msgs == 0 and sub.pending_bytes == 0, "nothing counted as pending (no slow consumer)"
    await sub.unsubscribe()
    await nc.publish(f"{prefix}.d", b"after")
    await nc.flush()
    await asyncio.sleep(0.1)
    assert got[-1] == b"199", "nothing after the unsubscribe"


async def test_a_failing_function_does_not_stop_the_connection(nc: nats.NATS, prefix: str) -> None:
    got: list[bytes] = []

    def deliver(msg: Msg) -> None:
        if msg.data == b"bad":
            raise ValueError("a bug")
        got.append(msg.data)

    sub = await nc.subscribe(f"{prefix}.f", cb=never)
    dispatch_directly(sub, deliver)
    for body in (b"1", b"bad", b"2"):
        await nc.publish(f"{prefix}.f", body)
    await nc.flush()
    await asyncio.sleep(0.1)
    assert got == [b"1", b"2"] and nc.is_connected


async def test_a_connection_with_such_a_subscription_drains(nats_server: Any, prefix: str) -> None:
    client = await nats.connect(nats_server.url)
    got: list[bytes] = []
    sub = await client.subscribe(f"{prefix}.x", cb=never)
    dispatch_directly(sub, lambda msg: got.append(msg.data))
    await client.publish(f"{prefix}.x", b"one")
    await client.flush()
    await asyncio.wait_for(client.drain(), 5)
    assert got == [b"one"] and client.is_closed


async def test_a_work_consumer_takes_jetstream_messages_directly_and_at_most_its_limit_at_once(
        nc: nats.NATS, prefix: str) -> None:
    js = nc.jetstream()
    stream = f"{prefix.upper()}_WORK"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.work.>"]))
    running, most, done = 0, 0, asyncio.Event()
    handled: list[bytes] = []
    gate = asyncio.Event()

    async def handle(root: JetStreamRoot) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        handled.append(root.body)
        await root.ack()
        running -= 1
        if len(handled) == 6:
            done.set()

    consumer = WorkConsumer(f"{prefix}.work.x", stream=stream, durable=f"{prefix}_x",
                            config=ConsumerConfig(deliver_subject=f"{prefix}.deliver.x", ack_wait=30),
                            handle=handle, max_workers=2)
    await consumer.start(js)
    try:
        assert consumer._direct, "nats-py's queue was replaced"
        for n in range(6):
            await js.publish(f"{prefix}.work.x", b"%d" % n)
        await asyncio.sleep(0.3)
        assert running == 2 and len(consumer._waiting) == 4, "two run, the rest wait in order"
        gate.set()
        await asyncio.wait_for(done.wait(), 5)
        assert most == 2 and sorted(handled) == [b"%d" % n for n in range(6)]
        assert handled[:2] == [b"0", b"1"]
        await nc.flush()  # the acks are written; the server applies them in its own time
        for _ in range(50):
            info = await js.consumer_info(stream, f"{prefix}_x")
            if info.num_ack_pending == 0:
                break
            await asyncio.sleep(0.1)
        assert info.num_ack_pending == 0 and info.num_pending == 0, "every message acked"
    finally:
        await consumer.stop(1)


def test_a_subscription_without_nats_pys_queue_is_left_as_it_is() -> None:
    class Other:
        _cb = never

    assert dispatch_directly(Other(), lambda msg: None) is False
