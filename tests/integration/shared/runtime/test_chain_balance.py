"""Processes spreading their chains hear each other over a real nats-server (shared/runtime/chain_balance.py)."""

from __future__ import annotations

import asyncio

import nats

from loopwire.shared.runtime.chain_balance import ChainBalance


async def test_processes_hear_each_other_over_nats(nc: nats.NATS, prefix: str) -> None:
    subject = f"{prefix}.ctl.chains"
    a, b = ChainBalance(subject, interval_s=0.05), ChainBalance(subject, interval_s=0.05)
    a.held, b.held = 30, 10
    await a.start(nc)
    await b.start(nc)
    try:
        for _ in range(250):  # each hears the other within an interval or two
            if a.excess():
                break
            await asyncio.sleep(0.02)
        assert a.excess() == 30 - (20 + 2) and b.excess() == 0
    finally:
        await a.stop()
        await b.stop()
