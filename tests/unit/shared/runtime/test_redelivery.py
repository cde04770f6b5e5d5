"""The one redelivery policy (shared/runtime/redelivery.py) as the handler runner applies it
(shared/runtime/chain.py): outages back off over the tolerance, faults are given up after a few
deliveries, undeliverable bodies at once, and what is given up is reported as a dead
letter naming the session, run and step of the failing envelope."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.exceptions
from nats import errors as nats_errors

from loopwire.shared.contract.envelopes import ExecuteTools
from loopwire.shared.runtime.chain import Chain, Delivery, hand_off, run_handler
from loopwire.shared.runtime.redelivery import (
    CommitContention,
    DeadLetter,
    RedeliveryPolicy,
    Undeliverable,
    is_outage,
)

pytestmark = pytest.mark.unit


class RootMessage:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ack(self) -> None:
        self.calls.append("ack")

    async def nack(self, delay: float | None = None) -> None:
        self.calls.append(f"nack {delay:g}")

    async def reject(self) -> None:
        self.calls.append("reject")

    async def in_progress(self) -> None:
        self.calls.append("in_progress")


def root(delivered: int, policy: RedeliveryPolicy, letters: list[DeadLetter] | None,
         body: bytes = b"{}") -> tuple[Delivery, RootMessage]:
    message = RootMessage()

    async def report(letter: DeadLetter) -> None:
        if letters is None:
            raise nats_errors.ConnectionClosedError()
        letters.append(letter)

    chain = Chain(message, delivered, 30.0, holds=True, policy=policy, report=report)
    return Delivery(body, chain, redelivered=delivered > 1), message


@pytest.mark.parametrize(("tolerance", "max_deliver"), [(300, 20), (10, 20), (60, 5), (3600, 20), (300, 2)])
def test_the_backoff_spans_the_tolerance_and_grows(tolerance: float, max_deliver: int) -> None:
    policy = RedeliveryPolicy(tolerance_s=tolerance, max_deliver=max_deliver)
    delays = [policy.delay(n) for n in range(1, max_deliver)]
    assert sum(delays) >= tolerance, "the deliveries span the tolerance"
    assert delays == sorted(delays), "never shorter than the one before"
    if 2 ** (max_deliver - 1) > tolerance:  # enough deliveries to start from 1 s
        assert delays[0] == 1.0, "a blip is retried at once"
    assert policy.span_s() == pytest.approx(sum(delays))
    # and not absurdly longer than asked: the last delivery comes within ~2x the tolerance
    assert sum(delays) <= max(2.2 * tolerance, 2.0)


def test_the_default_policy_does_not_burn_a_delivery_a_second() -> None:
    policy = RedeliveryPolicy()  # 300 s, 20 deliveries
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 16]
    assert sum(policy.delay(n) for n in range(1, 11)) > 60, "ten deliveries take more than a minute"


@pytest.mark.parametrize(("exc", "outage"), [
    (redis.exceptions.ConnectionError("Connection refused"), True),
    (redis.exceptions.BusyLoadingError("loading"), True),
    (redis.exceptions.TimeoutError(), True),
    (nats_errors.TimeoutError(), True),
    (nats_errors.ConnectionClosedError(), True),
    (TimeoutError(), True),
    (ConnectionRefusedError(), True),
    (CommitContention("20 conflicting commits"), True),
    (KeyError("type"), False),
    (TypeError("unhashable"), False),
    (ValueError("bad"), False),
    (redis.exceptions.ResponseError("WRONGTYPE"), False),
])
def test_outages_are_told_from_faults(exc: BaseException, outage: bool) -> None:
    assert is_outage(exc) is outage


def test_an_outage_wrapped_in_another_error_is_still_an_outage() -> None:
    try:
        try:
            raise redis.exceptions.ConnectionError("gone")
        except redis.exceptions.ConnectionError as inner:
            raise RuntimeError("could not store the step") from inner
    except RuntimeError as exc:
        assert is_outage(exc)


async def test_an_outage_is_nacked_with_a_delay_that_grows_and_never_given_up() -> None:
    policy = RedeliveryPolicy(tolerance_s=300, max_deliver=20)
    letters: list[DeadLetter] = []

    async def handler(d: Delivery) -> None:
        raise redis.exceptions.ConnectionError("Connection refused")

    settled = []
    for delivered in (1, 2, 3, 10, 19):
        delivery, message = root(delivered, policy, letters)
        await run_handler(handler, delivery)
        settled.append(message.calls[-1])
    assert settled == [f"nack {policy.delay(n):g}" for n in (1, 2, 3, 10, 19)]
    assert letters == [], "an outage is JetStream's to give up (max deliveries), after the tolerance"


async def test_a_fault_is_retried_then_given_up_as_a_dead_letter() -> None:
    policy = RedeliveryPolicy(fault_max_deliver=3)
    letters: list[DeadLetter] = []
    body = b'{"session_id": "s1", "run_id": "r1", "step_id": "r1:g1"}'

    async def handler(d: Delivery) -> None:
        raise KeyError("a content block without a type")

    outcomes = []
    for delivered in (1, 2, 3):
        delivery, message = root(delivered, policy, letters, body)
        await run_handler(handler, delivery)
        outcomes.append(message.calls[-1])
    assert outcomes == ["nack 1", "nack 1", "reject"]
    (letter,) = letters
    assert (letter.session_id, letter.run_id, letter.step_id, letter.deliveries) == ("s1", "r1", "r1:g1", 3)
    assert letter.reason.startswith("fault: KeyError")


async def test_an_undeliverable_body_is_given_up_at_once() -> None:
    letters: list[DeadLetter] = []

    async def handler(d: Delivery) -> None:
        raise Undeliverable("not an envelope")

    delivery, message = root(1, RedeliveryPolicy(), letters, b"garbage")
    await run_handler(handler, delivery)
    assert message.calls == ["reject"]
    assert letters[0].reason == "malformed: not an envelope" and letters[0].session_id is None


async def test_a_dead_letter_that_cannot_be_published_is_not_lost() -> None:
    async def handler(d: Delivery) -> None:
        raise Undeliverable("not an envelope")

    delivery, message = root(1, RedeliveryPolicy(), None)  # publishing the letter fails
    await run_handler(handler, delivery)
    assert message.calls == ["nack 1"], "redelivered: it is given up once the letter can be published"


async def test_a_hop_that_keeps_failing_is_given_up_as_its_own_message_naming_it() -> None:
    # In `loopwire up` the failing step is a hop handed over in process: it goes to
    # JetStream as its own message, its attempt here counted as its first delivery, and is
    # given up there after its own fault budget. Its root (the run's first work message)
    # is acked: the rest of the chain is not redone.
    policy = RedeliveryPolicy(fault_max_deliver=2)
    letters: list[DeadLetter] = []
    tasks: set[asyncio.Task[None]] = set()
    env = ExecuteTools(session_id="s9", run_id="r9", step_id="r9:t2", calls=[])
    published: list[Any] = []

    async def poisoned(d: Delivery) -> None:
        raise TypeError("poison")

    async def publish() -> None:
        published.append(env)

    async def handler(d: Delivery) -> None:
        assert hand_off(poisoned, env, tasks, subject="loopwire.work.tools.execute", fallback=publish)

    delivery, message = root(1, policy, letters, b'{"session_id": "s9", "step_id": "r9:g1"}')
    await run_handler(handler, delivery)
    while tasks:
        await asyncio.wait(set(tasks))
    assert message.calls[-1] == "ack" and published == [env] and letters == []
    # Its first JetStream delivery is its second attempt (bus.ATTEMPTS_HEADER): given up.
    hop, hop_message = root(2, policy, letters, env.model_dump_json().encode())
    await run_handler(poisoned, hop)
    assert hop_message.calls[-1] == "reject"
    (letter,) = letters
    assert (letter.session_id, letter.run_id, letter.step_id, letter.deliveries) == ("s9", "r9", "r9:t2", 2)


async def test_an_outage_beside_a_fault_keeps_the_message_for_the_tolerance() -> None:
    policy = RedeliveryPolicy(fault_max_deliver=1)
    letters: list[DeadLetter] = []
    tasks: set[asyncio.Task[None]] = set()

    async def fault(d: Delivery) -> None:
        raise TypeError("poison")

    async def outage(d: Delivery) -> None:
        raise redis.exceptions.ConnectionError("gone")

    async def handler(d: Delivery) -> None:
        # Hops that could not be published on their own either (no fallback): the root
        # carries them, and the chain is recovered from it.
        hand_off(fault, b"{}", tasks)
        hand_off(outage, b"{}", tasks)

    delivery, message = root(1, policy, letters)
    await run_handler(handler, delivery)
    while tasks:
        await asyncio.wait(set(tasks))
    # Give-up is for a fault alone: with the store away the fault may be its doing.
    assert message.calls[-1] == "nack 1" and letters == []
