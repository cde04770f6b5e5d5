"""ChainBalance (shared/runtime/chain_balance.py): a process holding more than its share of work
chains sheds hops to JetStream, at most its excess per interval; alone it never does.
The reports go over a real nats-server."""

from __future__ import annotations

import asyncio

from loopwire.shared.observability import metrics
from loopwire.shared.runtime.chain import Chain, Delivery, hand_off, run_handler
from loopwire.shared.runtime.chain_balance import ChainBalance


def test_alone_or_within_its_share_nothing_is_shed() -> None:
    balance = ChainBalance("t.ctl.chains", interval_s=0.5)
    balance.held = 50
    balance.tick(now=10.0)
    assert balance.excess(now=10.0) == 0 and not balance.should_shed()  # no peers
    balance.on_report("other", 48, now=10.0)
    balance.tick(now=10.0)
    assert balance.excess(now=10.0) == 0 and not balance.should_shed()  # 50 vs mean 49 + 2


def test_a_process_over_its_share_sheds_its_excess_once_per_interval() -> None:
    balance = ChainBalance("t.ctl.chains", interval_s=0.5)
    balance.held = 114
    balance.on_report("other", 86, now=10.0)
    balance.tick(now=10.0)
    # mean 100, margin 5: 9 chains too many, shed one hop each until the next tick.
    assert balance.excess(now=10.0) == 9
    assert [balance.should_shed() for _ in range(10)] == [True] * 9 + [False]
    assert balance.shed == 9


def test_silent_peers_are_forgotten() -> None:
    balance = ChainBalance("t.ctl.chains", interval_s=0.5)
    balance.held = 100
    balance.on_report("other", 10, now=10.0)
    balance.on_report(balance.instance, 0, now=10.0)  # its own report, echoed back: ignored
    assert balance.excess(now=10.0) > 0
    balance.tick(now=12.0)  # three intervals without a word
    assert balance.excess(now=12.0) == 0 and not balance.should_shed()


async def test_hand_off_counts_held_chains_and_publishes_when_told_to_shed() -> None:
    balance = ChainBalance("t.ctl.chains")
    tasks: set[asyncio.Task[None]] = set()
    answers: list[bool] = []
    go = asyncio.Event()

    async def hop(d: Delivery) -> None:
        await go.wait()
        await d.ack()

    async def handler(d: Delivery) -> None:
        answers.append(hand_off(hop, b"a", tasks, balance=balance))
        balance._shed_budget = 1  # as a tick would set it for a process over its share
        answers.append(hand_off(hop, b"b", tasks, balance=balance))
        await d.ack()

    class Root:
        settled: list[str] = []

        async def ack(self) -> None:
            self.settled.append("ack")

        async def in_progress(self) -> None:
            return None

    root = Root()
    gauge = metrics.WORK_CHAINS._value.get()
    await run_handler(handler, Delivery(b"r", Chain(root, 1, 30.0, holds=True)))
    assert answers == [True, False] and balance.held == 1 and balance.shed == 1
    assert metrics.WORK_CHAINS._value.get() == gauge + 1  # loopwire_work_chains
    go.set()
    while tasks:
        await asyncio.wait(set(tasks))
    assert balance.held == 0 and root.settled == ["ack"]
    assert metrics.WORK_CHAINS._value.get() == gauge


