"""Progress events through the contract (loopwire's additions, docs/protocol.md): `generating` when a generation
starts, `tools.progress` as the calls of one turn finish, and the `source` of each
`user.message` (a steer's says `steer`, a follow-up taken at the outer boundary says
`follow_up`), so a UI needs no guessing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


def sid() -> str:
    return f"e2e-progress-{uuid.uuid4().hex[:8]}"


def last_text(content: str | list[dict[str, Any]]) -> str | None:
    return content if isinstance(content, str) else content[-1].get("text")


async def test_generating_and_tools_progress(nc: NatsClient, fake: FakeAnthropic,
                                             tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"add", "slow_echo"})
    tool_provider.slow_delay_s = 1.0  # finishes last: progress follows the finishing order
    fake.script("*", [
        {"text": "Three at once.", "tool_use": [{"name": "slow_echo", "input": {"text": "late"}},
                                                {"name": "add", "input": {"a": 1, "b": 2}},
                                                {"name": "add", "input": {"a": 3, "b": 4}}]},
        {"text": "One more.", "tool_use": [{"name": "add", "input": {"a": 5, "b": 6}}]},
        {"text": "Done: 3, 7, 11.", "stop_reason": "end_turn"},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "add things", "tools": ["add", "slow_echo"],
                                   "model": {"primary": "claude-sonnet-4-5"}})
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "completed", ended
    ev.check_bodies()

    generating = ev.of("generating")
    assert [(g["turn"], g["model"]) for g in generating] == [(1, "claude-sonnet-4-5"), (2, "claude-sonnet-4-5"),
                                                             (3, "claude-sonnet-4-5")]
    for g in generating:  # before anything of its turn's answer
        first_of_turn = min(e["seq"] for e in ev.events
                            if e["kind"] in ("text.delta", "message") and e.get("turn") == g["turn"])
        assert g["seq"] < first_of_turn

    progress = sorted(ev.of("tools.progress"), key=lambda p: p["seq"])
    assert [(p["turn"], p["total"], p["completed"]) for p in progress] == [(1, 3, 1), (1, 3, 2), (1, 3, 3),
                                                                         (2, 1, 1)]
    results = sorted(ev.of("tool.result"), key=lambda r: r["seq"])
    for p in progress:  # each follows the result that completed it
        done = [r for r in results if r["turn"] == p["turn"] and r["seq"] < p["seq"]]
        assert len(done) == p["completed"], (p, done)
    last_of_turn_1 = max(r["seq"] for r in results if r["turn"] == 1)
    slow = next(r for r in results if r["name"] == "slow_echo")
    assert slow["seq"] == last_of_turn_1, "the slow call finished last"

    # Signals of the moment: not in the transcript, which keeps every other event.
    transcript = await query(nc, "transcript.get", {"session_id": s})
    assert not {e["kind"] for e in transcript["events"]} & {"generating", "tools.progress", "text.delta"}
    assert transcript["events"] == ev.durable()


async def test_user_messages_say_where_they_came_from(nc: NatsClient, fake: FakeAnthropic,
                                                      tool_provider: ToolProvider) -> None:
    await wait_for_tools(nc, {"slow_echo"})
    tool_provider.slow_delay_s = 4.0
    tool_provider.slow_started.clear()
    fake.script("*", [
        {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]},
        {"text": "Steered.", "stop_reason": "end_turn"},
        {"text": "Followed up.", "stop_reason": "end_turn"},
    ])
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "echo x", "tools": ["slow_echo"]})
        await asyncio.wait_for(tool_provider.slow_started.wait(), 15)
        await ev.publish("message", {"content": "and afterwards, this"})  # queued for the boundary
        await ev.publish("steer", {"content": "stop echoing"})            # applied at once
        ended = await ev.wait_for("run.ended")
    assert ended["status"] == "completed" and ended["final_text"] == "Steered.\n\nFollowed up.", ended
    ev.check_bodies()

    users = [(u["source"], last_text(u["message"]["content"])) for u in ev.of("user.message")]
    assert users == [("input", "echo x"), ("steer", "stop echoing"), ("follow_up", "and afterwards, this")]
    steer = ev.of("user.message")[1]
    assert steer["message"]["content"][0]["type"] == "tool_result", "the cancelled call's result goes first"
