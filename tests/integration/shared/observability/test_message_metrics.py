"""Message-level metrics never carry a session id in a label."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any


async def test_the_middleware_counts_every_message_once_per_masked_subject(nats_server: Any) -> None:
    """Received, processed (by status), durations and in-flight, through the cached label
    children: each message counted once, sessions masked, nothing left in flight."""
    from faststream.nats import NatsBroker

    from loopwire.shared.observability import metrics
    from loopwire.shared.observability.message_metrics import message_metrics_middleware

    prefix = f"mm{uuid.uuid4().hex[:6]}"
    broker = NatsBroker(nats_server.url, logger=None, middlewares=[message_metrics_middleware()])
    seen = asyncio.Event()
    count = 0

    @broker.subscriber(f"{prefix}.in.*.start")
    async def handle(body: Any) -> None:
        nonlocal count
        count += 1
        if count == 5:
            seen.set()

    def value(name: str, **labels: str) -> float:
        got = metrics.REGISTRY.get_sample_value(name, {"app_name": "loopwire", "broker": "nats",
                                                       "handler": f"{prefix}.in.*.start", **labels})
        return got or 0.0

    await broker.start()
    try:
        for n in range(5):
            await broker._connection.publish(f"{prefix}.in.s{n}.start", b"{}")  # type: ignore[union-attr]
        await asyncio.wait_for(seen.wait(), 5)
        await asyncio.sleep(0.05)  # the middleware's finally runs after the handler
    finally:
        await broker.stop()
    assert value("loopwire_faststream_received_messages_total") == 5
    assert value("loopwire_faststream_received_processed_messages_total", status="acked") == 5
    assert value("loopwire_faststream_received_processed_messages_duration_seconds_count") == 5
    assert value("loopwire_faststream_received_messages_in_process") == 0
