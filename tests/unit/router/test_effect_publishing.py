"""The router's effects, performed in their order (services/router/shell/effect_publishing.py):
a hop's work goes out while the PubAcks of the events before it are in flight, and those
are awaited before anything else that follows; a work publish that fails gives the
PubAcks up."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from loopwire.router.core.effects import EmitEvent, PublishNotice, PublishWork
from loopwire.router.shell.effect_publishing import EffectPublisher
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ExecuteTools
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.dispatcher import Dispatcher
from loopwire.shared.runtime.redelivery import RedeliveryPolicy


class RecordingInFlight:
    def __init__(self, log: list[str], what: str) -> None:
        self.log = log
        self.what = what

    async def settle(self) -> None:
        self.log.append(f"settle {self.what}")

    def cancel(self) -> None:
        self.log.append(f"cancel {self.what}")


class RecordingBus:
    """What EffectPublisher asks of shared/runtime/bus.py's Bus, written to one log."""

    def __init__(self, fail_work: bool = False) -> None:
        self.log: list[str] = []
        self.nc = self
        self.fail_work = fail_work

    async def send_stored(self, sid: str, stored: list[tuple[dict[str, Any], bool]]) -> RecordingInFlight:
        what = "+".join(event["kind"] for event, _ in stored)
        self.log.append(f"send {what}")
        return RecordingInFlight(self.log, what)

    async def send_many(self, sid: str, events: list[tuple[str | None, str, str | None, dict[str, Any]]]) -> RecordingInFlight:
        what = "+".join(kind for _, kind, _, _ in events)
        self.log.append(f"append and send {what}")
        return RecordingInFlight(self.log, what)

    async def publish_work(self, subject: str, envelope: dict[str, Any], msg_id: str) -> None:
        self.log.append(f"work {subject} {envelope.get('result_to')}")
        if self.fail_work:
            raise TimeoutError("no PubAck")

    async def publish(self, subject: str, data: bytes) -> None:
        self.log.append(f"notice {subject} {orjson.loads(data)}")


def publisher(bus: RecordingBus) -> EffectPublisher:
    settings, subjects = Settings(), Subjects("lwx")
    dispatch = Dispatcher(subjects, policy=RedeliveryPolicy(), replica_id="r1", direct_results=True,
                          chain_max_hops=0, direct_timeout_s=1.0, summary_timeout_s=1.0)
    dispatch._bus = bus  # type: ignore[assignment]
    ctx = SimpleNamespace(settings=settings, subjects=subjects, bus=bus, replica_id="r1", dispatch=dispatch)
    return EffectPublisher(ctx)  # type: ignore[arg-type]


def event(kind: str) -> EmitEvent:
    return EmitEvent(kind=kind, key=f"k-{kind}", run_id="run1", fields={"turn": 1})


def stored(*kinds: str) -> list[tuple[dict[str, Any], bool]]:
    return [({"kind": kind, "seq": n}, True) for n, kind in enumerate(kinds, start=1)]


TOOLS = ExecuteTools(session_id="s1", run_id="run1", step_id="st1", turn=1, calls=[])
WORK = PublishWork(work=TOOLS, envelope=TOOLS.model_dump(mode="json"), msg_id="m1")


async def test_the_work_goes_out_while_the_events_before_it_are_acknowledged() -> None:
    bus = RecordingBus()
    effects = [event("message"), event("tool.call"), WORK, PublishNotice(body={"run_id": "run1"})]
    await publisher(bus).perform("s1", effects, stored=stored("message", "tool.call"))
    assert bus.log == [
        "send message+tool.call",
        "work lwx.work.tools.execute r1",
        "settle message+tool.call",
        "notice lwx.ctl.s1.cancel {'run_id': 'run1'}",
    ]


async def test_events_not_stored_with_the_commit_are_appended_then_overlap_the_same_way() -> None:
    bus = RecordingBus()
    effects = [event("tool.result"), event("user.message"), WORK, event("phase.changed")]
    await publisher(bus).perform("s1", effects)
    assert bus.log == [
        "append and send tool.result+user.message",
        "work lwx.work.tools.execute r1",
        "settle tool.result+user.message",
        "append and send phase.changed",
        "settle phase.changed",
    ]


async def test_events_before_anything_but_work_are_acknowledged_first() -> None:
    bus = RecordingBus()
    effects = [event("message"), PublishNotice(body={"run_id": "run1"}), WORK]
    await publisher(bus).perform("s1", effects, stored=stored("message"))
    assert bus.log == [
        "send message",
        "settle message",
        "notice lwx.ctl.s1.cancel {'run_id': 'run1'}",
        "work lwx.work.tools.execute r1",
    ]


async def test_a_failed_work_publish_gives_the_pubacks_up_and_raises() -> None:
    bus = RecordingBus(fail_work=True)
    with pytest.raises(TimeoutError):
        await publisher(bus).perform("s1", [event("message"), WORK], stored=stored("message"))
    assert bus.log == ["send message", "work lwx.work.tools.execute r1", "cancel message"]
