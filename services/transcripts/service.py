"""The transcripts service: answers `session.get`, `transcript.get` and `sessions.list` (core
request/reply, one queue group across replicas). The event log itself is written by the
emitting services through shared.event_log (seq assignment and storage in one Lua call)
and published to LOOPWIRE_EVENTS."""

from __future__ import annotations

import logging

import orjson
from faststream.nats import NatsBroker, NatsMessage

from loopwire.shared.contract import SessionGetRequest, SessionsListRequest, TranscriptGetRequest, error_reply
from loopwire.shared.runtime import ServiceContext

from .queries import parse_query, session_get, transcript_get
from .sessions_list import sessions_list

log = logging.getLogger("loopwire.transcripts")


class TranscriptsService:
    name = "transcripts"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def register(self, broker: NatsBroker) -> None:
        queue = f"{self.ctx.settings.subject_prefix}-transcripts"
        broker.subscriber(self.ctx.subjects.session_get, queue=queue)(self.on_session_get)
        broker.subscriber(self.ctx.subjects.transcript_get, queue=queue)(self.on_transcript_get)
        broker.subscriber(self.ctx.subjects.sessions_list, queue=queue)(self.on_sessions_list)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def on_session_get(self, msg: NatsMessage) -> bytes:
        req = parse_query(msg.body, SessionGetRequest, self.ctx.settings.max_body_depth)
        if isinstance(req, dict):
            return orjson.dumps(req)
        try:
            return orjson.dumps(await session_get(req, self.ctx.sessions, self.ctx.events))
        except Exception as exc:
            log.exception("session.get failed")
            return orjson.dumps(error_reply("internal", f"session.get failed: {exc}"))

    async def on_transcript_get(self, msg: NatsMessage) -> bytes:
        req = parse_query(msg.body, TranscriptGetRequest, self.ctx.settings.max_body_depth)
        if isinstance(req, dict):
            return orjson.dumps(req)
        try:
            return orjson.dumps(await transcript_get(req, self.ctx.events))
        except Exception as exc:
            log.exception("transcript.get failed")
            return orjson.dumps(error_reply("internal", f"transcript.get failed: {exc}"))

    async def on_sessions_list(self, msg: NatsMessage) -> bytes:
        req = parse_query(msg.body, SessionsListRequest, self.ctx.settings.max_body_depth)
        if isinstance(req, dict):
            return orjson.dumps(req)
        try:
            return orjson.dumps(await sessions_list(req, self.ctx.sessions))
        except Exception as exc:
            log.exception("sessions.list failed")
            return orjson.dumps(error_reply("internal", f"sessions.list failed: {exc}"))
