"""Cancel notices reach the in-flight steps they name, and only those."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.inflight import (
    CancelSignal,
    Heartbeat,
    InflightSteps,
    StepCancelled,
    unless_cancelled,
)

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


async def test_heartbeat_beats_while_the_step_runs_and_stops_with_it() -> None:
    beats = 0
    third = asyncio.Event()

    async def beat() -> None:
        nonlocal beats
        beats += 1
        if beats == 2:
            raise RuntimeError("a failed heartbeat is not fatal")
        if beats == 3:
            third.set()

    with Heartbeat(beat, ack_wait_s=0.15):
        await asyncio.wait_for(third.wait(), 5)
    after = beats
    await asyncio.sleep(0.2)  # four intervals: none comes after the step ended
    assert after >= 3 and beats == after


async def test_a_short_step_sends_no_heartbeat() -> None:
    beats: list[int] = []

    async def beat() -> None:
        beats.append(1)

    with Heartbeat(beat, ack_wait_s=0.3):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.15)
    assert beats == []


async def test_unless_cancelled_stops_the_work_in_its_own_task() -> None:
    cancel = CancelSignal()
    stopped = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(10)
        finally:
            stopped.set()
        return "never"

    asyncio.get_running_loop().call_later(0.02, cancel.set)
    with pytest.raises(StepCancelled):
        await unless_cancelled(work(), cancel)
    task = asyncio.current_task()
    assert stopped.is_set() and task is not None and task.cancelling() == 0  # nothing left pending
    await asyncio.sleep(0)  # and the task goes on normally


async def test_unless_cancelled_returns_the_result_or_refuses_to_start() -> None:
    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    cancel = CancelSignal()
    assert await unless_cancelled(work(), cancel) == 7
    assert await unless_cancelled(work(), None) == 7
    cancel.set()
    with pytest.raises(StepCancelled):
        await unless_cancelled(work(), cancel)  # set before: the work never starts (and is closed)


async def test_unless_cancelled_leaves_other_cancellations_alone() -> None:
    cancel = CancelSignal()

    async def slow() -> None:
        await asyncio.sleep(10)

    # A timeout around it still times out.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await unless_cancelled(slow(), cancel)
    # A cancellation from outside stays a cancellation.
    task = asyncio.create_task(unless_cancelled(slow(), cancel))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not cancel._callbacks  # nothing stays registered on the signal
