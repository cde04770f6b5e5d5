"""Spreading work chains over the replicas of `loopwire up`.

A work chain keeps a run in the process that took its first work message
(shared/runtime/chain.py), and JetStream hands those first messages to the replicas of a deliver
group at random. With 200 runs starting at once, one of two workers often gets 57% of
them, and the run as a whole lasts as long as the busier worker needs: measured in `make
bench`, that alone cost 10-15% of the throughput.

So every process says how many chains it holds, on core NATS `<prefix>.ctl.chains` every
`interval_s` (LOOPWIRE_CHAIN_BALANCE_INTERVAL_S), and listens to the others. A process
holding more than its share (the mean over the live replicas, itself included, plus a
margin) publishes the next hop of one of its chains instead of handing it off: that chain
ends here, and its run continues in whichever replica JetStream gives the hop to. It
sheds at most its excess per interval, so reports a moment old do not make it shed more
than it should. Without reports from others (one process, or the others silent for three
intervals) nothing is shed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from loopwire.shared.contract import codec
from loopwire.shared.runtime.hooks import HOOKS

__all__ = ["ChainBalance", "log"]

log = logging.getLogger("loopwire.chain_balance")

MARGIN_SHARE = 0.05
"""Tolerated excess over the mean, as a share of it (at least MARGIN_MIN chains)."""
MARGIN_MIN = 2


class ChainBalance:
    def __init__(self, subject: str, interval_s: float = 0.1) -> None:
        self.subject = subject
        self.interval_s = interval_s
        self.instance = uuid.uuid4().hex[:12]
        self.held = 0
        """Chains this process holds now (with a hop handed off and not all settled)."""
        self.shed = 0
        """Hops published instead of handed off to even out the load, in all."""
        self._peers: dict[str, tuple[int, float]] = {}
        self._shed_budget = 0
        self._task: asyncio.Task[None] | None = None
        self._sub: Any = None

    # -- what the chains tell it -------------------------------------------------------------
    def opened(self) -> None:
        self.held += 1
        HOOKS.chain_opened()

    def closed(self) -> None:
        self.held -= 1
        HOOKS.chain_closed()

    def should_shed(self) -> bool:
        """Whether the next hop should go to JetStream to move a chain elsewhere."""
        if self._shed_budget <= 0:
            return False
        self._shed_budget -= 1
        self.shed += 1
        return True

    def excess(self, now: float | None = None) -> int:
        """Chains held here above the share of this process (0 when none or no peers)."""
        now = time.monotonic() if now is None else now
        live = [held for held, seen in self._peers.values() if now - seen <= 3 * self.interval_s]
        if not live:
            return 0
        mean = (self.held + sum(live)) / (len(live) + 1)
        limit = mean + max(MARGIN_MIN, MARGIN_SHARE * mean)
        return max(0, int(self.held - limit + 0.999))

    def on_report(self, instance: str, held: int, now: float | None = None) -> None:
        if instance != self.instance:
            self._peers[instance] = (held, time.monotonic() if now is None else now)

    def tick(self, now: float | None = None) -> None:
        """Once per interval: forget silent peers, and allow shedding this interval's excess."""
        now = time.monotonic() if now is None else now
        for instance, (_, seen) in list(self._peers.items()):
            if now - seen > 3 * self.interval_s:
                del self._peers[instance]
        self._shed_budget = self.excess(now)

    # -- the reports on NATS ----------------------------------------------------------------
    async def start(self, nc: Any) -> None:
        async def on_message(msg: Any) -> None:
            with contextlib.suppress(Exception):  # a malformed report is ignored
                body = codec.loads(msg.data)
                self.on_report(str(body["instance"]), int(body["chains"]))

        self._sub = await nc.subscribe(self.subject, cb=on_message)
        self._task = asyncio.create_task(self._report(nc), name="chain-balance")

    async def _report(self, nc: Any) -> None:
        while True:
            self.tick()
            try:
                await nc.publish(self.subject, codec.dumps({"instance": self.instance, "chains": self.held}))
            except Exception as exc:  # best effort: a missed report only delays balancing
                log.debug("chain report not sent: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
