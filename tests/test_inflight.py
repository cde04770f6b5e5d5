"""Cancel notices reach the in-flight steps they name, and only those."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from loopwire.shared.inflight import InflightSteps, keep_alive
from loopwire.shared.subjects import Subjects

pytestmark = pytest.mark.unit


async def test_notice_sets_the_steps_of_its_session_and_run() -> None:
    steps = InflightSteps(Subjects("lw"))
    with steps.track("s1", "r1") as a, steps.track("s1", "r2") as b, steps.track("s2", "r1") as c:
        await steps.on_notice(SimpleNamespace(subject="lw.ctl.s1.cancel", data=b'{"run_id": "r1"}'))
        assert a.is_set() and not b.is_set() and not c.is_set()
        await steps.on_notice(SimpleNamespace(subject="lw.ctl.s1.cancel", data=b""))
        assert b.is_set() and not c.is_set()
        await steps.on_notice(SimpleNamespace(subject="other.ctl.s2.cancel", data=b""))
        assert not c.is_set(), "another prefix's notice is ignored"
    assert steps.cancel("s1") == 0, "finished steps are forgotten"


async def test_keep_alive_beats_until_cancelled() -> None:
    beats = 0
    third = asyncio.Event()

    async def beat() -> None:
        nonlocal beats
        beats += 1
        if beats == 2:
            raise RuntimeError("a failed heartbeat is not fatal")
        if beats == 3:
            third.set()

    task = asyncio.create_task(keep_alive(beat, ack_wait_s=0.15))
    await asyncio.wait_for(third.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert beats >= 3
