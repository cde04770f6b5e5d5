"""A request to a stream's leader is asked again while the stream elects one
(shared/stores/stream_leader.py), and gives up at the JetStream timeout."""

from __future__ import annotations

import asyncio
import time

import pytest
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
