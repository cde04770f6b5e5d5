"""`loopwire.api.sessions.list` (loopwire's addition, docs/protocol.md) through the contract: sessions most recently
updated first, pages by cursor with nothing twice or missed, the status filter, and
clear errors for a bad request."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from nats.aio.client import Client as NatsClient

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


async def run_once(nc: NatsClient, sid: str, verb: str = "start", count: int = 1) -> None:
    async with SessionEvents(nc, sid) as ev:
        body = {"v": 1, "input": "hi", "tools": []} if verb == "start" else {"content": "again"}
        await ev.publish(verb, body)
        await ev.wait_for("run.ended", count=1, timeout=60)


async def every_page(nc: NatsClient, limit: int, **filters: str) -> list[dict]:
    listed: list[dict] = []
    cursor = None
    for _ in range(1000):
        page = await query(nc, "sessions.list", {"limit": limit, "cursor": cursor, **filters})
        assert len(page["sessions"]) <= limit
        listed += page["sessions"]
        cursor = page["cursor"]
        if cursor is None:
            return listed
    raise AssertionError("the pages never ended")


@pytest.mark.timeout(240)
async def test_sessions_most_recent_first_paged_and_filtered(nc: NatsClient, fake: FakeAnthropic,
                                                            tool_provider: ToolProvider) -> None:
    fake.script("*", [{"chunks": [f"answer {n}"], "stop_reason": "end_turn"} for n in range(4)])
    tag = uuid.uuid4().hex[:6]
    s1, s2, s3 = (f"list-{tag}-{n}" for n in (1, 2, 3))
    for sid in (s1, s2, s3):
        await run_once(nc, sid)
    async with SessionEvents(nc, s1) as ev:  # a follow-up: s1 is now the most recent
        await ev.publish("message", {"content": "again"})
        await ev.wait_for("run.ended", count=1, timeout=60)

    page = await query(nc, "sessions.list", {})
    mine = [s for s in page["sessions"] if s["session_id"].startswith(f"list-{tag}")]
    assert [s["session_id"] for s in mine] == [s1, s3, s2]
    assert page["sessions"][0]["session_id"] == s1, "the most recently updated of all"
    assert {(s["status"], s["profile"]) for s in mine} == {("idle", "agentic")}
    assert [s["turns"] for s in mine] == [2, 1, 1]
    times = [datetime.fromisoformat(s["updated_at"].replace("Z", "+00:00")) for s in page["sessions"]]
    assert times == sorted(times, reverse=True)

    # pages of 2 give the same list, each session once
    paged = await every_page(nc, 2)
    assert [s["session_id"] for s in paged] == [s["session_id"] for s in page["sessions"]]

    # status filter: a run waiting for approval
    await wait_for_tools(nc, {"add"}, timeout=60)
    fake.script("*", [{"chunks": ["Adding."], "tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]}])
    waiting = f"list-{tag}-approve"
    async with SessionEvents(nc, waiting) as ev:
        await ev.publish("start", {"v": 1, "input": "add", "tools": ["add"], "tool_permissions": {"add": "approve"}})
        await ev.wait_for("approval.requested", timeout=60)
        awaiting = await every_page(nc, 50, status="awaiting_approval")
        assert waiting in [s["session_id"] for s in awaiting]
        assert {s["status"] for s in awaiting} == {"awaiting_approval"}
        idle = await every_page(nc, 50, status="idle")
        assert waiting not in [s["session_id"] for s in idle] and s1 in [s["session_id"] for s in idle]
        await ev.publish("abort", {"reason": "test over"})
        await ev.wait_for("run.ended", timeout=60)


@pytest.mark.parametrize(("body", "code"), [
    ({"cursor": "not-a-cursor"}, "invalid_request"),
    ({"status": "sleeping"}, "invalid_request"),
    ({"limit": 0}, "invalid_request"),
    (b"[1]", "bad_request"),
])
async def test_bad_requests_get_an_error(nc: NatsClient, body: dict | bytes, code: str) -> None:
    reply = await query(nc, "sessions.list", body)
    assert reply["error"]["code"] == code
