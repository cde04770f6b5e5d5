"""Where a run stands (`phase`, `activity` of session.get and sessions.list), derived from
what the stores hold: the router's state through its pure core (tests/router_driver.py),
and, when the state is gone, the transcript the run wrote. The same end to end:
tests/e2e/test_run_position.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopwire.shared.contract.protocol import SessionGetRequest
from loopwire.shared.contract.session_state import run_position
from loopwire.shared.contract.tenant_limits import TenantLimit, TenantLimits
from loopwire.shared.stores.event_log import InMemoryEventLog
from loopwire.shared.stores.session_store import InMemorySessionStore
from loopwire.transcripts.queries import session_get
from loopwire.transcripts.sessions_list import summary
from tests.router_driver import CFG, Driver, Recorder, call

QUEUEING = replace(CFG, tenant_limits=TenantLimits.parse({"acme": TenantLimit(max_running=1)}, tenants=True))


def test_a_run_queued_for_its_tenant_has_no_phase_until_admitted() -> None:
    d = Driver(QUEUEING, sid="acme.s1")
    d.start()
    assert d.state.status == "queued" and run_position(d.state) == (None, "queued")
    d.admit("granted")
    assert run_position(d.state) == ("execute", "generating")


def test_a_tool_held_for_approval_then_running() -> None:
    d = Driver()
    d.start(input="clean up", tool_permissions={"rm": "approve"})
    d.answer("Removing.", call("t1", "rm", {"path": "/tmp/x"}))
    assert d.state.status == "awaiting_approval"
    assert run_position(d.state) == ("execute", "awaiting_approval")
    checkpoint = d.run.approvals.checkpoint
    assert checkpoint is not None
    d.decision(checkpoint.id, "approve")
    assert run_position(d.state) == ("execute", "tools"), "approved: the calls are in flight"
    d.tools("removed")
    assert run_position(d.state) == ("execute", "generating")
    d.answer("Removed.")
    assert d.state.status == "idle" and run_position(d.state) == (None, None)


async def stored(d: Driver) -> InMemorySessionStore:
    sessions = InMemorySessionStore()
    assert await sessions.commit(d.state.session_id, 0, d.state.dump(), history_len_before=0, append=d.history)
    return sessions


async def test_session_get_and_the_list_answer_the_stored_run_position() -> None:
    d = Driver()
    d.start(input="add", tools=["add"])
    d.answer("Adding.", call("t1", "add"))
    got = await session_get(SessionGetRequest(session_id="s1"), await stored(d))
    assert (got["status"], got["phase"], got["activity"]) == ("running", "execute", "tools")
    row = summary("s1", d.state, 0)
    assert (row["phase"], row["activity"]) == ("execute", "tools")
    unknown = await session_get(SessionGetRequest(session_id="nobody"), InMemorySessionStore())
    assert (unknown["status"], unknown["phase"], unknown["activity"]) == ("unknown", None, None)


async def from_transcript(d: Recorder) -> dict[str, Any]:
    """session.get of a session whose state is gone but whose transcript is not."""
    events = InMemoryEventLog()
    assert await events.restore(d.state.session_id, d.transcript)
    return await session_get(SessionGetRequest(session_id=d.state.session_id), InMemorySessionStore(), events)


async def test_a_session_rebuilt_from_its_transcript_says_the_phase_its_run_waits_in() -> None:
    d = Recorder()
    d.start(input="write", profile="turn_by_turn")
    d.answer("A draft.")
    assert run_position(d.state) == ("review", "awaiting_approval")
    got = await from_transcript(d)
    assert got["source"] == "transcript"
    assert (got["status"], got["phase"], got["activity"]) == ("awaiting_approval", "review", "awaiting_approval"), \
        "the phase the router rebuilds the run in (journal_resume.py)"


async def test_an_idle_session_rebuilt_from_its_transcript_stands_nowhere() -> None:
    d = Recorder()
    d.start(input="hi")
    d.answer("Hello.")
    got = await from_transcript(d)
    assert (got["source"], got["status"], got["phase"], got["activity"]) == ("transcript", "idle", None, None)
