"""A hop's events and its work over a real nats-server (shared/runtime/bus.py): the work sent
while the events' PubAcks are in flight still reaches the server behind them, and events
whose stream did not answer are sent again, in their order, until it does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import nats
import orjson
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StreamConfig

from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.pub_acks import PubAcks
from loopwire.shared.stores.event_log import InMemoryEventLog
from loopwire.testing import ServerHandle, start_nats
from tests.loop_errors import LostErrors


@pytest.fixture(scope="module")
def own_nats() -> Iterator[ServerHandle]:
    """A nats-server of this module's own: what reaches the server, and in which order, is
    what these tests watch, away from the suite's shared server and every other test's
    leftovers on it."""
    handle = start_nats()
    yield handle
    handle.stop()


@pytest.fixture
async def nc(own_nats: ServerHandle) -> AsyncIterator[nats.NATS]:
    client = await nats.connect(own_nats.url)
    yield client
    await client.drain()


EVENTS = [("run1", "message", "m1", {"turn": 1}), ("run1", "tool.call", "c1", {"turn": 1, "name": "add"})]


async def streams(nc: nats.NATS, prefix: str, *, events: bool = True) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=f"LOOPWIRE_WORK_{prefix.upper()}", subjects=[f"{prefix}.work.>"]))
    if events:
        await js.add_stream(StreamConfig(name=f"LOOPWIRE_EVENTS_{prefix.upper()}", subjects=[f"{prefix}.out.>"]))


async def stored_in_order(nc: nats.NATS, prefix: str) -> list[tuple[int, str]]:
    """(seq, kind) of every message of the events stream, in the stream's own order."""
    js = nc.jetstream()
    stream = f"LOOPWIRE_EVENTS_{prefix.upper()}"
    last = (await js.stream_info(stream)).state.last_seq
    bodies = [orjson.loads((await js.get_msg(stream, n)).data or b"{}") for n in range(1, last + 1)]
    return [(body["seq"], body["kind"]) for body in bodies]


async def test_the_work_reaches_the_server_behind_the_events_whose_pubacks_are_in_flight(
        nc: nats.NATS, prefix: str) -> None:
    """One stream takes both the events and the work here, so its sequence is the order in
    which the server received them (a second connection listening would show the same, and
    in full runs a spy's connection was once heard to receive nothing in 10 s)."""
    js = nc.jetstream()
    stream = f"LOOPWIRE_ALL_{prefix.upper()}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.out.>", f"{prefix}.work.>"]))
    subjects = Subjects(prefix)
    bus = Bus(nc, subjects, InMemoryEventLog())
    in_flight = await bus.send_many("s1", EVENTS)
    await bus.publish_work(subjects.tools_execute, {"session_id": "s1", "step_id": "st1"}, msg_id="s1:st1")
    await in_flight.settle()
    assert [e["seq"] for e in in_flight.events] == [1, 2]
    last = (await js.stream_info(stream)).state.last_seq
    received = [(await js.get_msg(stream, n)).subject for n in range(1, last + 1)]
    assert received == [subjects.event("s1", "message"), subjects.event("s1", "tool.call"), subjects.tools_execute]


async def test_events_the_stream_did_not_take_are_sent_again_in_order_once_it_answers(
        nc: nats.NATS, prefix: str) -> None:
    await streams(nc, prefix, events=False)  # nobody stores the events yet: "no responders"
    subjects = Subjects(prefix)
    bus = Bus(nc, subjects, InMemoryEventLog(), jetstream_timeout_s=5.0)
    in_flight = await bus.send_many("s2", EVENTS)
    await bus.publish_work(subjects.tools_execute, {"session_id": "s2", "step_id": "st1"}, msg_id="s2:st1")
    settling = asyncio.create_task(in_flight.settle())
    await asyncio.sleep(0.6)
    assert not settling.done(), "the events wait for a stream to take them"
    await nc.jetstream().add_stream(StreamConfig(name=f"LOOPWIRE_EVENTS_{prefix.upper()}", subjects=[f"{prefix}.out.>"]))
    await asyncio.wait_for(settling, 5)
    assert await stored_in_order(nc, prefix) == [(1, "message"), (2, "tool.call")], "each once, in order"
    work = await nc.jetstream().get_last_msg(f"LOOPWIRE_WORK_{prefix.upper()}", subjects.tools_execute)
    assert orjson.loads(work.data or b"{}")["session_id"] == "s2"


async def test_pubacks_given_up_leave_no_unretrieved_error(nc: nats.NATS, prefix: str,
                                                           unretrieved_errors: LostErrors) -> None:
    bus = Bus(nc, Subjects(prefix), InMemoryEventLog())  # no stream takes the events
    in_flight = await bus.send_many("s3", EVENTS)
    await asyncio.sleep(0.3)  # each PubAck has failed by now ("no responders")
    in_flight.cancel()  # as perform does when the work's publish raised
    del in_flight
    lost = await unretrieved_errors()
    assert not lost, lost


async def test_the_pubacks_come_back_as_the_stream_answers_and_leave_nothing_awaited(nc: nats.NATS, prefix: str) -> None:
    """The bus's own PubAck inbox (shared/runtime/pub_acks.py): each publish's answer as the
    stream gave it, a JetStream error as nats-py's error, and no entry left behind once
    answered or given up."""
    await streams(nc, prefix)
    bus = Bus(nc, Subjects(prefix), InMemoryEventLog())
    subject = f"{prefix}.out.s4.message"
    acks = [await bus.acks.publish(subject, b'{"n": %d}' % n, {"Nats-Msg-Id": f"s4:{n}"}) for n in (1, 2, 1)]
    answers = await asyncio.gather(*acks)
    stream = f"LOOPWIRE_EVENTS_{prefix.upper()}"
    assert [(a["stream"], a["seq"], a.get("duplicate", False)) for a in answers] == [
        (stream, 1, False), (stream, 2, False), (stream, 1, True)]
    wrong = await bus.acks.publish(subject, b"{}", {"Nats-Msg-Id": "s4:3", "Nats-Expected-Stream": "ANOTHER"})
    try:
        await wrong
        raise AssertionError("a publish to the wrong stream was stored")
    except nats.js.errors.APIError as exc:
        assert exc.err_code == 10060, exc  # expected stream does not match
    nowhere = await bus.acks.publish(f"{prefix}.nowhere", b"{}", {"Nats-Msg-Id": "x"})
    try:
        await nowhere
        raise AssertionError("a publish nobody stores was answered")
    except nats.js.errors.NoStreamResponseError:
        pass
    given_up = await bus.acks.publish(f"{prefix}.nowhere", b"{}", {"Nats-Msg-Id": "y"})
    given_up.cancel()
    await asyncio.sleep(0.2)  # its answer ("no responders") comes to nobody
    assert len(bus.acks) == 0


async def test_a_puback_that_never_comes_times_out_by_itself_and_leaves_nothing_awaited(
        nc: nats.NATS, prefix: str) -> None:
    """The PubAcks time out on their own (one timer for the table, not one per publish):
    a publish that a subscriber takes and never answers fails with nats-py's TimeoutError
    after the table's timeout, while one answered meanwhile is not touched."""
    await streams(nc, prefix)
    silent = await nc.subscribe(f"{prefix}.silent")  # takes the publish and never answers
    acks = PubAcks(nc, timeout_s=0.4)
    try:
        started = asyncio.get_running_loop().time()
        lost = await acks.publish(f"{prefix}.silent", b"{}", {"Nats-Msg-Id": "z"})
        stored = await acks.publish(f"{prefix}.work.x", b"{}", {"Nats-Msg-Id": "w"})
        assert (await stored)["seq"] == 1
        with pytest.raises(NatsTimeoutError):
            await lost
        waited = asyncio.get_running_loop().time() - started
        assert 0.4 <= waited < 0.9, waited
        await asyncio.sleep(0)
        assert len(acks) == 0
    finally:
        await silent.unsubscribe()
