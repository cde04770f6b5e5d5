"""Hand-overs: work for another service as a call when that service runs in this process,
else as a JetStream work message, under one policy.

Inside `loopwire up` (LOOPWIRE_LOCAL_HANDOVER) a hop between services can be a call
instead of a message (shared/runtime/chain.py). The caller never imports the other
service: it names it (the names are the services', passed in by them) and asks
`ServiceContext.here(name, offers)` for it as one of the protocols below, or None when
that service does not run here.

The policy, the same for every hand-over (`hand_over`, and a handed-off hop of a chain in
chain.py): the call when the target is here; a call that raises goes on as its own work
message after the pause its second delivery would have had (`pause_before_jetstream`),
and its attempt here counts as its first delivery (bus.ATTEMPTS_HEADER), so from there it
is redelivered and given up exactly as between separate processes; a target that is not
here gets the message at once, with no attempt counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from loopwire.shared.contract.envelopes import (
    CountTokens,
    Generate,
    GenerationResult,
    HandedResult,
    TokenCount,
)
from loopwire.shared.runtime.redelivery import FAULT_DELAY_S, RedeliveryPolicy, is_outage

log = logging.getLogger("loopwire.handover")

T = TypeVar("T")
Publish = Callable[[int], Awaitable[None]]
"""Publishes the work as a JetStream message, counting that many attempts made in process."""


@runtime_checkable
class ResultReceiver(Protocol):
    """A service that applies a step's result, as the services that produce results hand it over."""

    async def accept_result(self, result: HandedResult, recover: bool = False) -> Any: ...


@runtime_checkable
class GenerationService(Protocol):
    """A service that runs a generation and counts tokens, as the service that assembles the
    context hands it one."""

    async def process(self, env: Generate,
                      heartbeat: Callable[[], Awaitable[None]] | None = None) -> GenerationResult: ...

    async def count_tokens(self, request: CountTokens) -> TokenCount: ...

    async def summarize(self, env: Generate) -> GenerationResult:
        """A non-streamed generation for the memory service (summaries, observations):
        what `<prefix>.rpc.llm.summarize` answers, errors included as a failed result."""
        ...


def pause_before_jetstream(outage: bool, policy: RedeliveryPolicy) -> float:
    """How long work that failed in process waits before it goes on as its own message: the
    pause its second delivery would have had (the policy's first delay after an outage,
    FAULT_DELAY_S after a fault)."""
    return policy.delay(1) if outage else FAULT_DELAY_S


async def to_jetstream(publish: Callable[[], Awaitable[None]], *, outage: bool, policy: RedeliveryPolicy,
                       delay: float | None = None) -> None:
    """Work that failed in process, onto JetStream after its pause (`delay` when the handler
    chose one). Raises when the publish fails (NATS away)."""
    await asyncio.sleep(delay if delay is not None else pause_before_jetstream(outage, policy))
    await publish()


async def hand_over(call: Callable[[], Awaitable[T]] | None, publish: Publish, *, policy: RedeliveryPolicy,
                    what: str) -> T | None:
    """`call()` when the target runs here (`call` is not None), else `publish(0)`. A call
    that raises is published after its pause, its attempt counted (`publish(1)`). The
    call's answer, or None when the work was published."""
    if call is None:
        await publish(0)
        return None
    try:
        return await call()
    except Exception as exc:
        log.warning("%s failed in process (%s: %s); publishing it as its own work message", what,
                    type(exc).__name__, exc)
        await to_jetstream(lambda: publish(1), outage=is_outage(exc), policy=policy)
        return None
