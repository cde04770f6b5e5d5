"""What receiving one work message costs, by the way it is consumed (CPU µs / message).

Every work hop of the split layout ends in a consumer of a JetStream push consumer with a
deliver group and explicit acks. This measures that path alone, in one process, the
handler acking and doing nothing else, on a stream in memory (no fsync):

- `faststream subscriber`: a FastStream subscriber as the work consumers were before
  they moved to nats-py: a raw-body decoder, `max_workers=64`, manual ack, loopwire's
  broker middlewares (log context, FastStream's Prometheus metrics).
- `faststream subscriber, max_workers=1`: the cheapest FastStream shape (no task group
  or limiter over anyio), which handles one message at a time: a work handler awaits
  Redis and NATS, so it would serialise the service.
- `loopwire work consumer`: shared/runtime/work_consumer.py, a nats-py callback with a
  task per message, up to 64 at once, with the observability layer's consume scope
  (log and trace context, the same FastStream metric series).
- `raw nats-py`: a nats-py callback that acks.

    .venv/bin/python -m tests.bench.consume_overhead --nats nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import time
import warnings
from typing import Any

from faststream import AckPolicy
from faststream.nats import JStream, NatsBroker
from nats.js.api import ConsumerConfig, StorageType, StreamConfig

from loopwire.launcher import make_broker
from loopwire.settings import Settings
from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer

MODES = ("faststream subscriber", "faststream subscriber, max_workers=1", "loopwire work consumer", "raw nats-py")


async def _raw_body(msg: Any) -> Any:
    return msg.body


async def measure(nats_url: str, mode: str, n: int = 4000, size: int = 300) -> float:
    """CPU µs of this process per message received and acked, publishing included (the
    same for all)."""
    broker: NatsBroker = make_broker(Settings(nats_url=nats_url)) if mode.startswith("faststream") else \
        NatsBroker(nats_url, logger=None)
    done = asyncio.Event()
    count = 0

    async def seen(ack: Any) -> None:
        nonlocal count
        await ack()
        count += 1
        if count == n:
            done.set()

    tag = f"{MODES.index(mode)}x{time.monotonic_ns()}"
    stream, subject, durable = f"BENCH_CONSUME_{tag}", f"bench.consume.{tag}", f"bench_consume_{tag}"
    config = ConsumerConfig(ack_wait=30, max_ack_pending=10_000, deliver_subject=f"bench.deliver.{tag}")
    if mode.startswith("faststream"):
        async def handler(body: bytes) -> None:
            await seen(broker.context.get_local("message").ack)

        with warnings.catch_warnings():  # about durable push consumers without a queue: ours has one
            warnings.filterwarnings("ignore", message="The JetStream Push consumer with the `durable`")
            broker.subscriber(subject, decoder=_raw_body, stream=JStream(name=stream, declare=False), durable=durable,
                              queue=durable, config=config, ack_policy=AckPolicy.MANUAL,
                              max_workers=1 if mode.endswith("=1") else 64)(handler)
    await broker.connect()
    nc: Any = broker._connection
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.MEMORY))
    consumer = None
    if mode == "loopwire work consumer":
        async def handle(root: JetStreamRoot) -> None:
            await seen(root.ack)
        consumer = WorkConsumer(subject, stream=stream, durable=durable, config=config, handle=handle)
        await consumer.start(js)
    elif mode == "raw nats-py":
        async def raw(msg: Any) -> None:
            await seen(msg.ack)
        await js.subscribe(subject, queue=durable, durable=durable, stream=stream, config=config, manual_ack=True,
                           cb=raw)
    await broker.start()
    await nc.flush()
    payload = b"x" * size
    t0 = time.process_time()
    for _ in range(n):
        await nc.publish(subject, payload)
    await asyncio.wait_for(done.wait(), 120)
    cpu = time.process_time() - t0
    if consumer is not None:
        await consumer.stop(5)
    await js.delete_stream(stream)
    await broker.stop()
    return 1e6 * cpu / n


async def measure_all(nats_url: str, rounds: int = 2) -> dict[str, float]:
    """The best of `rounds` per mode (the least disturbed by anything else running)."""
    import loopwire.shared.observability  # noqa: F401  (the consume scope, as in a service)

    best: dict[str, float] = {}
    for _ in range(rounds):
        for mode in MODES:
            us = await measure(nats_url, mode)
            best[mode] = min(us, best.get(mode, us))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nats", required=True)
    args = parser.parse_args()
    for mode, us in asyncio.run(measure_all(args.nats)).items():
        print(f"{mode:<42}{us:8.0f} µs CPU / message")


if __name__ == "__main__":
    main()
