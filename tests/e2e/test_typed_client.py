"""`loopwire.Client` against `loopwire up`: typed events in seq order, each once; the
verbs; the queries."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import loopwire
from loopwire.client import RunFailedToStart
from loopwire.shared.contract.events import (
    ApprovalRequested,
    Event,
    MessageEvent,
    RunEnded,
    RunStarted,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from loopwire.testing import LoopwireContainer
from tests.e2e.conftest import ToolProvider, wait_for_tools
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.e2e


async def test_run_approve_and_typed_events(system: LoopwireContainer, fake: FakeAnthropic,
                                            tool_provider: ToolProvider) -> None:
    async with await loopwire.Client.connect(system.get_nats_url()) as lw:
        await wait_for_tools(lw.raw.nc, {"add"})
        fake.script("*", [{"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}]},
                          {"text": "The sum is 42.", "chunks": ["The sum ", "is 42."]}])
        seen: list[Event] = []
        asked: list[ApprovalRequested] = []

        def approve(event: ApprovalRequested) -> bool:
            asked.append(event)
            return True

        ended = await lw.run("2 + 40?", tools=["add"], tool_permissions={"add": "approve"},
                             on_event=seen.append, approve=approve, timeout=60)
        assert isinstance(ended, RunEnded) and ended.status == "completed" and ended.final_text == "The sum is 42."
        assert [c["input"] for c in asked[0].tool_calls or []] == [{"a": 2, "b": 40}]
        assert isinstance(seen[0], RunStarted) and seen[-1] == ended
        assert any(isinstance(e, ToolCallEvent) for e in seen) and any(isinstance(e, ToolResultEvent) for e in seen)
        assert "".join(e.text for e in seen if isinstance(e, TextDelta)).endswith("The sum is 42.")
        seqs = [e.seq for e in seen]
        assert seqs == sorted(set(seqs)), "in seq order, each once"

        # the whole story again from the transcript: typed, and the same stored events
        sid = ended.session_id
        stored = await lw.transcript(sid)
        assert [e.seq for e in stored] == [e.seq for e in seen if not isinstance(e, TextDelta)
                                           and e.kind not in ("generating", "tools.progress")]
        assert isinstance(stored[1], MessageEvent) or any(isinstance(e, MessageEvent) for e in stored)
        session = await lw.session(sid)
        assert session["status"] == "idle" and session["turns"] == 2
        assert "add" in {t["name"] for t in await lw.tools()}
        listed, _ = await lw.sessions(limit=50)
        assert sid in {s["session_id"] for s in listed}


async def test_events_replays_then_follows_and_the_verbs_act(system: LoopwireContainer, fake: FakeAnthropic,
                                                            tool_provider: ToolProvider) -> None:
    async with await loopwire.Client.connect(system.get_nats_url()) as lw:
        await wait_for_tools(lw.raw.nc, {"slow_echo"})
        tool_provider.slow_delay_s = 30
        fake.script("*", [{"text": "Echo.", "tool_use": [{"name": "slow_echo", "input": {"text": "a"}}]},
                          {"text": "Echo.", "tool_use": [{"name": "slow_echo", "input": {"text": "b"}}]},
                          {"text": "Second run."}])
        sid = await lw.start("echo", session_id=f"typed-{uuid.uuid4().hex[:8]}", tools=["slow_echo"])
        await asyncio.wait_for(tool_provider.slow_started.wait(), 20)
        await lw.steer(sid, "louder")
        kinds: list[str] = []
        ended: list[RunEnded] = []
        aborted = False
        # From seq 0: the stored events first, then live ones, each once.
        async with asyncio.timeout(60):
            async for event in lw.events(sid):
                kinds.append(event.kind)
                if event.kind == "user.message" and getattr(event, "source", None) == "steer" and not aborted:
                    aborted = True
                    await lw.abort(sid, "enough")
                if isinstance(event, RunEnded):
                    ended.append(event)
                    if len(ended) == 1:
                        await lw.send(sid, "again, please")
                    else:
                        break
        assert [e.status for e in ended] == ["aborted", "completed"]
        assert ended[1].final_text == "Second run."
        assert kinds[0] == "run.started" and kinds.count("run.started") == 2

        with pytest.raises(RunFailedToStart, match="invalid_body"):
            await lw.run("x", session_id=f"typed-{uuid.uuid4().hex[:8]}", profile="no-such-profile", timeout=20)
