"""What receiving one message costs, by the way a handler is written (CPU µs / message).

Every work hop of loopwire ends in a FastStream handler. This measures the consume path
alone on core NATS (no JetStream, no work in the handler), in one process:

- `faststream, NatsMessage parameter`: `async def h(msg: NatsMessage)`, as our services
  write them. `NatsMessage` is `Annotated[..., Context("message")]`, and fast_depends
  resolves a sync `Context.use` through `anyio.to_thread.run_sync`: a thread-pool round
  trip per message (fast_depends/core/model.py, `custom_to_solve`).
- `faststream, body only`: `async def h(body: bytes)`, the message taken from
  `broker.context.get_local("message")`: no custom field, no thread.
- `raw nats-py`: a plain subscription callback.

    .venv/bin/python -m tests.bench.consume_overhead --nats nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from faststream.nats import NatsBroker, NatsMessage

MODES = ("faststream, NatsMessage parameter", "faststream, body only", "raw nats-py")


async def measure(nats_url: str, mode: str, n: int = 4000, size: int = 300) -> float:
    """CPU µs of this process per message received, publishing included (the same for all)."""
    broker = NatsBroker(nats_url, logger=None)  # no access logs, no shutdown chatter
    done = asyncio.Event()
    count = 0

    def seen() -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    subject = f"bench.consume.{mode.split()[0].strip(',')}.{time.monotonic_ns()}"
    if mode == MODES[0]:
        @broker.subscriber(subject, max_workers=64)
        async def with_context(msg: NatsMessage) -> None:
            seen()
    elif mode == MODES[1]:
        @broker.subscriber(subject, max_workers=64)
        async def body_only(body: bytes) -> None:
            broker.context.get_local("message")
            seen()
    await broker.start()
    nc: Any = broker._connection
    if mode == MODES[2]:
        async def raw(msg: Any) -> None:
            seen()
        await nc.subscribe(subject, cb=raw)
    await nc.flush()
    payload = b"x" * size
    t0 = time.process_time()
    for _ in range(n):
        await nc.publish(subject, payload)
    await asyncio.wait_for(done.wait(), 60)
    cpu = time.process_time() - t0
    await broker.stop()
    return 1e6 * cpu / n


async def measure_all(nats_url: str, rounds: int = 2) -> dict[str, float]:
    """The best of `rounds` per mode (the least disturbed by anything else running)."""
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
        print(f"{mode:<36}{us:8.0f} µs CPU / message")


if __name__ == "__main__":
    main()
