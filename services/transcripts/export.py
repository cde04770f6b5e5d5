"""`<prefix>.api.session.export` (docs/protocol.md, "Deleting and exporting a session"): one
document of everything loopwire keeps of a session, for its person to take away: the
state as `session.get` answers it and every stored event as `transcript.get` pages them,
each large content block (shared/stores/blobs.py) replaced by its full content."""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract.codec import now_rfc3339
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.protocol import (
    PROTOCOL_VERSION,
    SessionExportRequest,
    SessionGetRequest,
    TranscriptGetRequest,
)
from loopwire.shared.stores.blobs import REF_KEY, BlobStore, resolve_messages
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.session_store import SessionStore
from loopwire.shared.stores.transcript import Archive

from .queries import session_get, transcript_get

PAGE = 1000
"""Events read per `transcript.get` page while the export gathers them all."""


class ExportRefused(Exception):
    """The error reply an export request gets (`code`, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def resolved(value: Any, blobs: BlobStore) -> Any:
    """`value` with every content list's reference blocks replaced by their content,
    wherever in an event it is (a `message`'s, a `tool.result`'s)."""
    if isinstance(value, list):
        if any(isinstance(b, dict) and (REF_KEY in b or b.get("type") == "tool_result") for b in value):
            value = (await resolve_messages([{"role": "user", "content": value}], blobs))[0]["content"]
        return [await resolved(v, blobs) for v in value]
    if isinstance(value, dict):
        return {k: await resolved(v, blobs) for k, v in value.items()}
    return value


async def session_export(
    req: SessionExportRequest,
    sessions: SessionStore,
    events: EventLogStore,
    *, blobs: BlobStore,
    archive: Archive | None = None,
) -> dict[str, Any]:
    state = await session_get(SessionGetRequest(session_id=req.session_id), sessions, events, archive=archive)
    if state.get("status") == "unknown":
        raise ExportRefused("unknown_session", f"session {req.session_id!r} has no state and no transcript")
    stored: list[AnyEvent] = []
    after = 0
    while True:
        page = await transcript_get(
            TranscriptGetRequest(session_id=req.session_id, after_seq=after, limit=PAGE), events, archive
        )
        stored += page["events"]
        if "next_after_seq" not in page:
            break
        after = page["next_after_seq"]
    state["messages"] = await resolve_messages(state.get("messages") or [], blobs)
    return {
        "v": PROTOCOL_VERSION,
        "session_id": req.session_id,
        "state": state,
        "events": [await resolved(e, blobs) for e in stored],
        # additions
        "exported_at": now_rfc3339(),
    }
