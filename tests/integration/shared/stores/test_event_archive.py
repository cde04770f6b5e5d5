"""A session's events read back from the LOOPWIRE_EVENTS stream (real nats-server), and a
session rebuilt from there when Redis lost its event log as well as its state."""

from __future__ import annotations

from typing import Any

import nats
import pytest

from loopwire.router.shell.rebuild import rebuild_session
from loopwire.settings import Settings
from loopwire.shared.contract.events import user_message_fields
from loopwire.shared.contract.run_state import RunConfig
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.streams import ensure_streams
from loopwire.shared.stores.event_archive import read_archive
from loopwire.shared.stores.event_log import InMemoryEventLog
from loopwire.shared.stores.session_store import InMemorySessionStore
from loopwire.testing.servers import ServerHandle

pytestmark = pytest.mark.integration

CONFIG = {"profile": "conversational", "system": "be brief", "models": ["m-own"], "max_tokens": 300,
          "temperature": 0.2, "tools": [], "max_turns": 9}


async def emit_run(bus: Bus, sid: str) -> None:
    await bus.emit(sid, "r1", "user.message", key="u1", fields=user_message_fields(
        {"role": "user", "content": [{"type": "text", "text": "My code is ALPHA-7."}]}, 0, "input", reported=set()))
    await bus.emit(sid, "r1", "run.started", key="s1", fields={"profile": "conversational", "config": CONFIG})
    await bus.emit(sid, "r1", "text.delta", key=None, fields={"turn": 1, "text": "Noted"})
    await bus.emit(sid, "r1", "message", key="m1", fields={"turn": 1, "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Noted."}]}, "model": "m-own", "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 2}})
    await bus.emit(sid, "r1", "run.ended", key="e1", fields={"status": "completed", "final_text": "Noted.", "conclusion": None,
                   "turns": 1, "usage": {"input_tokens": 10, "output_tokens": 2}, "cost_usd": 0.0})


async def test_the_stream_gives_back_a_sessions_events_and_a_rebuild_restores_log_state_and_settings(
        nats_server: ServerHandle, prefix: str) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        settings = Settings(subject_prefix=prefix)
        await ensure_streams(js, settings)
        subjects = Subjects(prefix)
        written = InMemoryEventLog()
        bus = Bus(nc, subjects, written)
        await emit_run(bus, "s-a")
        await emit_run(bus, "s-b")  # another session's events stay out of s-a's
        archived = await read_archive(js, subjects, "s-a")
        assert archived == await written.read("s-a"), "every stored event, in seq order, nothing else"
        assert "text.delta" not in [e["kind"] for e in archived]
        assert await read_archive(js, subjects, "nobody") == []

        lost_log, lost_state = InMemoryEventLog(), InMemorySessionStore()  # Redis lost everything
        state = await rebuild_session("s-a", lost_log, lost_state, archive=lambda s: read_archive(js, subjects, s))
        assert state is not None
        assert SessionState.load(state, "s-a").last_config == RunConfig.model_validate(CONFIG), \
            "the rebuilt session keeps the settings its run started with"
        assert await lost_log.read("s-a") == archived and await lost_log.last_seq("s-a") == archived[-1]["seq"]
        history: list[dict[str, Any]] = await lost_state.history("s-a")
        assert [m["role"] for m in history] == ["user", "assistant"]
        info = await js.stream_info(f"LOOPWIRE_EVENTS_{prefix.upper()}")
        consumers = info.state.consumer_count
        assert consumers == 0, "the reader's consumers are gone"
    finally:
        await nc.drain()
