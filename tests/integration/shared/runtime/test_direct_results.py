"""Step results sent straight to a replica over a real nats-server (shared/runtime/direct_results.py):
applied and answered; refused with the reason; no replica; a replica that never answers;
and a stop that lets the request in flight finish while new ones find no responder."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout
from redis.exceptions import ConnectionError as RedisConnectionError

from loopwire.shared.runtime.direct_results import (
    DirectDeliveryFailed,
    DirectReceiver,
    DirectRequests,
    request_applied,
)
from loopwire.shared.runtime.redelivery import is_outage


async def test_a_result_is_answered_once_applied(nc: nats.NATS, prefix: str) -> None:
    applied: list[tuple[bytes, str | None]] = []
    gate = asyncio.Event()

    async def apply(body: bytes, headers: dict[str, str]) -> None:
        await gate.wait()
        applied.append((body, headers.get("Loopwire-Recover")))

    receiver = DirectReceiver(f"{prefix}.direct.router.r1", apply)
    await receiver.start(nc)
    try:
        sending = asyncio.create_task(request_applied(DirectRequests(nc, 5), receiver.subject, b'{"x": 1}',
                                                      headers={"Loopwire-Recover": "1"}))
        await asyncio.sleep(0.2)
        assert not sending.done(), "the sender waits until the result is applied"
        gate.set()
        assert await sending is True
        assert applied == [(b'{"x": 1}', "1")]
    finally:
        await receiver.stop(1)


async def test_a_result_the_replica_cannot_apply_says_whether_it_was_an_outage(nc: nats.NATS, prefix: str) -> None:
    async def redis_away(body: bytes, headers: dict[str, str]) -> None:
        raise RedisConnectionError("redis is away")

    async def broken(body: bytes, headers: dict[str, str]) -> None:
        raise ValueError("a bug")

    away = DirectReceiver(f"{prefix}.direct.router.away", redis_away)
    bug = DirectReceiver(f"{prefix}.direct.router.bug", broken)
    await away.start(nc)
    await bug.start(nc)
    try:
        with pytest.raises(DirectDeliveryFailed) as outage:
            await request_applied(DirectRequests(nc, 5), away.subject, b"{}", headers={})
        assert outage.value.outage and is_outage(outage.value), "waited out as an outage"
        with pytest.raises(DirectDeliveryFailed) as fault:
            await request_applied(DirectRequests(nc, 5), bug.subject, b"{}", headers={})
        assert not fault.value.outage and not is_outage(fault.value)
    finally:
        await away.stop(1)
        await bug.stop(1)


async def test_no_replica_and_a_silent_replica(nc: nats.NATS, prefix: str) -> None:
    assert await request_applied(DirectRequests(nc, 5), f"{prefix}.direct.router.gone", b"{}", headers={}) is False

    silent = await nc.subscribe(f"{prefix}.direct.router.silent")  # takes it and never answers
    try:
        with pytest.raises(NatsTimeout):
            await request_applied(DirectRequests(nc, 0.3), f"{prefix}.direct.router.silent", b"{}", headers={})
    finally:
        await silent.unsubscribe()


async def test_a_stop_finishes_the_request_in_flight_and_takes_no_new_one(nc: nats.NATS, prefix: str) -> None:
    started, gate = asyncio.Event(), asyncio.Event()

    async def apply(body: bytes, headers: dict[str, str]) -> None:
        started.set()
        await gate.wait()

    receiver = DirectReceiver(f"{prefix}.direct.router.r2", apply)
    await receiver.start(nc)
    in_flight = asyncio.create_task(request_applied(DirectRequests(nc, 5), receiver.subject, b"{}", headers={}))
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(receiver.stop(5))
    await asyncio.sleep(0.2)
    assert await request_applied(DirectRequests(nc, 5), receiver.subject, b"{}", headers={}) is False, \
        "a stopping replica takes no new result: its sender publishes it"
    assert not stopping.done()
    gate.set()
    await stopping
    assert await in_flight is True
