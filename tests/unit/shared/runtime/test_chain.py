"""Work chains (shared/runtime/chain.py): hops handed off in-process under one JetStream message,
which is settled only when the last of them has; ServiceContext.hand_off decides between
a hop and a published message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import AssembleContext
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.chain import Chain, Delivery, current_delivery, hand_off, run_handler
from loopwire.shared.runtime.service_context import ServiceContext


class RootMessage:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ack(self) -> None:
        self.calls.append("ack")

    async def nack(self, delay: float | None = None) -> None:
        self.calls.append(f"nack {delay}")

    async def reject(self) -> None:
        self.calls.append("reject")

    async def in_progress(self) -> None:
        self.calls.append("in_progress")

    @property
    def settled(self) -> list[str]:
        return [c for c in self.calls if c != "in_progress"]


def root(delivered: int = 1, holds: bool = True, ack_wait_s: float = 30.0) -> tuple[Delivery, RootMessage]:
    message = RootMessage()
    chain = Chain(message, delivered, ack_wait_s, holds=holds)
    return Delivery(b"root", chain, redelivered=delivered > 1), message


async def until_idle(tasks: set[asyncio.Task[None]]) -> None:
    while tasks:
        await asyncio.wait(set(tasks))


async def test_the_root_is_acked_only_after_every_hop_handed_off_under_it() -> None:
    tasks: set[asyncio.Task[None]] = set()
    release = asyncio.Event()
    seen: list[tuple[bytes, bool]] = []

    async def second_hop(d: Delivery) -> None:
        await release.wait()
        seen.append((d.body, d.redelivered))
        await d.ack()

    async def first_hop(d: Delivery) -> None:
        seen.append((d.body, d.redelivered))
        assert hand_off(second_hop, b"hop 2", tasks)  # a hop of a hop: the same chain
        await d.ack()

    async def handler(d: Delivery) -> None:
        assert current_delivery() is d
        assert hand_off(first_hop, b"hop 1", tasks)
        await d.ack()

    delivery, message = root()
    await run_handler(handler, delivery)
    assert message.settled == [] and delivery.chain.open == 1  # the handler acked; its hop holds the root
    await asyncio.sleep(0.01)
    assert message.settled == []
    release.set()
    await until_idle(tasks)
    assert message.settled == ["ack"]
    assert seen == [(b"hop 1", False), (b"hop 2", False)]
    assert current_delivery() is None


async def test_a_long_chain_keeps_its_root_alive() -> None:
    tasks: set[asyncio.Task[None]] = set()

    async def slow_hop(d: Delivery) -> None:
        await asyncio.sleep(0.35)
        await d.ack()

    async def handler(d: Delivery) -> None:
        hand_off(slow_hop, b"slow", tasks)
        await d.ack()

    delivery, message = root(ack_wait_s=0.3)  # a beat every 0.1 s
    await run_handler(handler, delivery)
    await until_idle(tasks)
    assert message.calls.count("in_progress") >= 2
    assert message.calls[-1] == "ack"


@pytest.mark.parametrize("how", ["nack", "outage", "fault"])
async def test_a_failed_hop_goes_to_jetstream_on_its_own_and_its_root_is_acked(how: str) -> None:
    # As between separate processes: the failing hop costs its own deliveries, not its
    # chain's. An outage's first redelivery waits the policy's first delay; a fault's a
    # fixed pause; a handler's own nack its delay.
    tasks: set[asyncio.Task[None]] = set()
    published: list[tuple[bytes, float]] = []
    began = asyncio.get_running_loop().time()

    async def failing_hop(d: Delivery) -> None:
        if how == "nack":
            await d.nack(delay=0.2)
        elif how == "outage":
            raise ConnectionError("redis went away")
        else:
            raise KeyError("a bug")

    async def fine_hop(d: Delivery) -> None:
        await asyncio.sleep(0.01)

    async def publish() -> None:
        published.append((b"x", round(asyncio.get_running_loop().time() - began, 1)))

    async def handler(d: Delivery) -> None:
        hand_off(failing_hop, b"x", tasks, fallback=publish)
        hand_off(fine_hop, b"y", tasks, fallback=publish)

    delivery, message = root()
    await run_handler(handler, delivery)
    await until_idle(tasks)
    assert [body for body, _ in published] == [b"x"], "the failed hop alone is published"
    assert published[0][1] >= {"nack": 0.2, "outage": 1.0, "fault": 1.0}[how]
    assert message.settled == ["ack"]


@pytest.mark.parametrize("how", ["outage", "fault"])
async def test_a_failed_hop_that_cannot_be_published_nacks_its_root(how: str) -> None:
    tasks: set[asyncio.Task[None]] = set()

    async def failing_hop(d: Delivery) -> None:
        raise ConnectionError("redis went away") if how == "outage" else KeyError("a bug")

    async def nats_away() -> None:
        raise ConnectionError("nats went away too")

    async def handler(d: Delivery) -> None:
        hand_off(failing_hop, b"x", tasks, fallback=nats_away)

    delivery, message = root()
    await run_handler(handler, delivery)
    await until_idle(tasks)
    # The chain is recovered from its root, redelivered (shared/runtime/chain.py).
    assert message.settled == ["nack 1.0"]


async def test_a_handler_that_returns_is_acked_and_one_that_raises_is_nacked() -> None:
    async def fine(d: Delivery) -> None:
        return None

    async def rejecting(d: Delivery) -> None:
        await d.reject()

    delivery, message = root()
    await run_handler(fine, delivery)
    assert message.settled == ["ack"]
    delivery, message = root()
    await run_handler(rejecting, delivery)
    assert message.settled == ["reject"]


async def test_a_redelivered_root_is_redelivered_and_its_hops_are_new() -> None:
    tasks: set[asyncio.Task[None]] = set()
    got: list[Delivery] = []

    async def hop(d: Delivery) -> None:
        got.append(d)

    async def handler(d: Delivery) -> None:
        got.append(d)
        hand_off(hop, b"hop", tasks)

    delivery, message = root(delivered=3)
    await run_handler(handler, delivery)
    await until_idle(tasks)
    assert [d.redelivered for d in got] == [True, False]
    assert message.settled == ["ack"]


async def test_no_hand_off_outside_a_chain_or_under_one_that_holds_none() -> None:
    async def hop(d: Delivery) -> None:
        raise AssertionError("not called")

    tasks: set[asyncio.Task[None]] = set()
    assert hand_off(hop, b"x", tasks) is False  # no delivery in this context
    results: list[bool] = []

    async def ingress_handler(d: Delivery) -> None:
        results.append(hand_off(hop, b"x", tasks))
        await d.ack()

    delivery, message = root(holds=False)
    await run_handler(ingress_handler, delivery)
    assert results == [False] and message.settled == ["ack"] and not tasks


class PublishedWork:
    def __init__(self) -> None:
        self.published: list[tuple[str, Any, str]] = []

    async def publish_work(self, subject: str, envelope: Any, msg_id: str, recover: bool = False,
                           attempts: int = 0) -> None:
        self.published.append((subject, envelope, msg_id))


def context(handlers: dict[str, Any]) -> tuple[ServiceContext, PublishedWork]:
    settings = Settings()
    bus = PublishedWork()
    ctx = ServiceContext(settings=settings.model_copy(update={"direct_results": False}),
                         subjects=Subjects(settings.subject_prefix), redis=None,  # type: ignore[arg-type]
                         sessions=None, steps=None, events=None, broker=None, blobs=None,  # type: ignore[arg-type]
                         _bus=bus)  # type: ignore[arg-type]
    ctx.dispatch.in_process = True
    for subject, handler in handlers.items():
        ctx.dispatch.take(subject, handler)
    return ctx, bus


ASSEMBLE = AssembleContext(session_id="s1", run_id="r1", step_id="s1", turn=1, history_len=1, models=["m"],
                           max_tokens=64)


@pytest.mark.parametrize("case", ["handler here", "no handler here", "stopping"])
async def test_the_dispatcher_hands_off_only_to_a_handler_in_this_process(case: str) -> None:
    got: list[Any] = []

    async def on_assemble(d: Delivery) -> None:
        got.append(d.envelope)
        await d.ack()

    ctx, bus = context({} if case == "no handler here" else {ctx_subject(): on_assemble})
    ctx.dispatch.stopping = case == "stopping"

    async def handler(d: Delivery) -> None:
        await ctx.dispatch.send(ASSEMBLE, msg_id="s1:assemble")
        await d.ack()

    delivery, message = root()
    await run_handler(handler, delivery)
    await ctx.dispatch.wait_for_hops(5)
    assert got == ([ASSEMBLE] if case == "handler here" else [])
    assert bus.published == ([] if case == "handler here" else [(ctx_subject(), ASSEMBLE, "s1:assemble")])
    assert message.settled == ["ack"]


def ctx_subject() -> str:
    return Subjects(Settings().subject_prefix).memory_assemble


async def test_a_chain_hands_off_at_most_max_hops_then_work_is_published() -> None:
    tasks: set[asyncio.Task[None]] = set()
    answers: list[bool] = []

    async def hop(d: Delivery) -> None:
        answers.append(hand_off(hop, b"next", tasks, max_hops=3))
        await d.ack()

    async def handler(d: Delivery) -> None:
        answers.append(hand_off(hop, b"first", tasks, max_hops=3))
        await d.ack()

    delivery, message = root()
    await run_handler(handler, delivery)
    await until_idle(tasks)
    assert answers == [True, True, True, False]  # the 4th goes to JetStream, a new chain
    assert delivery.chain.hops == 3 and message.settled == ["ack"]


async def test_code_a_handler_left_running_after_it_settled_hands_off_nothing() -> None:
    tasks: set[asyncio.Task[None]] = set()
    later: list[asyncio.Task[bool]] = []

    async def hop(d: Delivery) -> None:
        raise AssertionError("not called")

    async def handler(d: Delivery) -> None:
        await d.ack()

        async def background() -> bool:  # inherits the handler's context
            return hand_off(hop, b"x", tasks)

        later.append(asyncio.create_task(background()))

    delivery, message = root()
    await run_handler(handler, delivery)
    assert await later[0] is False and not tasks and message.settled == ["ack"]


async def test_a_model_is_handed_off_as_it_is_and_bytes_are_validated() -> None:
    from loopwire.shared.contract.envelopes import ExecuteTools
    from loopwire.shared.runtime.chain import decode

    env = ExecuteTools(session_id="s1", run_id="r1", step_id="r1:t1", calls=[])
    tasks: set[asyncio.Task[None]] = set()
    got: list[ExecuteTools] = []

    async def hop(d: Delivery) -> None:
        got.append(decode(d, ExecuteTools))
        await d.ack()

    async def handler(d: Delivery) -> None:
        hand_off(hop, env, tasks)
        hand_off(hop, env.model_dump_json().encode(), tasks)  # a replayed outbox's dict, as JSON
        await d.ack()

    delivery, message = root()
    await run_handler(handler, delivery)
    await until_idle(tasks)
    assert got[0] is env and got[1] == env and got[1] is not env
    with pytest.raises(ValueError):
        decode(Delivery(b"{not json", delivery.chain), ExecuteTools)
