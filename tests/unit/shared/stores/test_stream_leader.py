"""A request to a stream's leader is asked again while the stream elects one
(shared/stores/stream_leader.py), and gives up at the JetStream timeout."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NoStreamResponseError, NotFoundError

from loopwire.shared.stores.stream_leader import ask_leader

pytestmark = pytest.mark.unit


async def test_asked_again_until_a_leader_answers() -> None:
    answers: list[BaseException | str] = [NoStreamResponseError(), "stored"]
    again: list[str] = []

    async def first() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def hang() -> str:
        await asyncio.sleep(10)  # sent while the old leader was going: never answered
        return "never"

    async def republish() -> str:
        again.append("again")
        return await first()

    assert await ask_leader(first, total_s=5) == "stored"
    answers[:] = ["stored"]
    assert await ask_leader(hang, again=republish, total_s=5, attempt_s=0.05) == "stored" and again == ["again"]


async def test_gives_up_at_the_timeout_and_passes_other_errors_on() -> None:
    async def leaderless() -> None:
        raise NoStreamResponseError()

    started = time.monotonic()
    with pytest.raises(NoStreamResponseError):
        await ask_leader(leaderless, total_s=0.6, attempt_s=0.1)
    assert 0.2 < time.monotonic() - started < 2  # asked a few times, not once

    async def missing() -> None:
        raise NotFoundError()

    with pytest.raises(NotFoundError):  # an answer, not an election: at once
        await ask_leader(missing, total_s=5)


async def test_a_timed_request_times_out_by_itself_and_is_sent_again() -> None:
    """`timed`: the request's own timeout (the PubAcks' expiry) ends an attempt; the attempt
    is sent again as after a timer's, and the last timeout reaches the caller."""
    sent: list[str] = []

    async def times_out() -> str:
        sent.append("first" if not sent else "again")
        await asyncio.sleep(0.05)
        if len(sent) < 3:
            raise NatsTimeoutError()
        return "stored"

    assert await ask_leader(times_out, total_s=5, attempt_s=0.05, timed=True) == "stored"
    assert sent == ["first", "again", "again"]

    async def never() -> str:
        await asyncio.sleep(0.05)
        raise NatsTimeoutError()

    with pytest.raises(NatsTimeoutError):
        await ask_leader(never, total_s=0.3, attempt_s=0.05, timed=True)
