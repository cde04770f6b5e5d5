"""The public queries on sessions, as pure functions of what the stores hold (the sessions
list in sessions_list.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.protocol import PROTOCOL_VERSION, SessionGetRequest, TranscriptGetRequest
from loopwire.shared.contract.query_replies import ForkedFromReply, Lineage, SessionGot
from loopwire.shared.contract.session_state import (
    SessionState,
    config_in_effect,
    current_run_id,
    forked_from_reply,
    forked_from_session,
    is_deleted,
    open_checkpoint_id,
    reported_cost,
    reported_usage,
    run_position,
    stored_state,
)
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.lineage import FORKED, lineage_events
from loopwire.shared.stores.session_store import SessionStore
from loopwire.shared.stores.transcript import Archive, Replayed, replay, restore_log


class StoreUnavailable(Exception):
    """A store did not answer the query in time: the reply is `unavailable`, ask again."""


async def session_get(req: SessionGetRequest, sessions: SessionStore,
                      events: EventLogStore | None = None, *, archive: Archive | None = None,
                      model_waiting: Callable[[str], Awaitable[bool]] | None = None) -> SessionGot:
    raw, _version = await sessions.load(req.session_id)
    if is_deleted(raw):
        return unknown_session(req.session_id)  # being deleted: gone already for every reader
    if raw is None and events is not None:
        # The state is gone but the transcript is not: answer from the transcript (the
        # router rebuilds the state itself at the session's next input).
        # When Redis lost the log too, the events stream still has it (event_archive.py).
        stored = await lineage_events(req.session_id, events, archive)
        replayed = replay(req.session_id, stored, in_order=True)
        if replayed is not None:
            return {**_reply_from_transcript(req.session_id, replayed), **await lineage(req.session_id, stored, sessions)}
    if raw is None:
        return unknown_session(req.session_id)
    st = stored_state(raw)
    config = config_in_effect(st)
    messages = await sessions.history(req.session_id)
    phase, activity = run_position(st)
    if activity == "generating" and model_waiting is not None and await model_waiting(req.session_id):
        activity = "waiting_for_model"
    return {
        "v": PROTOCOL_VERSION,
        "session_id": req.session_id,
        "status": st.status,
        "profile": st.profile,
        "turns": st.turns,
        "usage": reported_usage(st),
        "cost_usd": reported_cost(st),
        "messages": messages,
        "run_id": current_run_id(st),
        "runs": st.runs,
        "plan": st.plan,
        "checkpoint_id": open_checkpoint_id(st),
        # the contract's later additions: the context fields, and the tools the run may use now
        "user_id": config.user_id if config is not None else None,
        "workspace_id": config.workspace_id if config is not None else None,
        "tools_active": st.run.tools.active if st.run is not None else None,
        # where the run stands, so a client that reconnects mid-run needs no replay
        "phase": phase,
        "activity": activity,
        **await lineage(req.session_id, st, sessions),
    }


def unknown_session(sid: str) -> SessionGot:
    """`session.get` of a session that does not exist (never did, or was deleted)."""
    return {"v": PROTOCOL_VERSION, "session_id": sid, "status": "unknown", "profile": None,
            "turns": 0, "usage": {"input_tokens": 0, "output_tokens": 0}, "cost_usd": 0.0, "messages": [],
            "phase": None, "activity": None}


async def lineage(sid: str, source: SessionState | list[AnyEvent], sessions: SessionStore) -> Lineage:
    """`forked_from` (`{"session_id", "seq", "cut_seq"}` or null) and `forks` (the sessions
    forked from this one that exist, oldest first): additions to `session.get`. `source`:
    the state, or the lineage events of a session whose state is gone."""
    forked_from: ForkedFromReply | None
    if isinstance(source, SessionState):
        forked_from = forked_from_reply(source)
    else:
        first = next((e for e in source if e.get("session_id") == sid), None)
        forked_from = ForkedFromReply(session_id=_text_or_none(first.get("from_session_id")),
                                      seq=_int_or_none(first.get("from_seq")),
                                      cut_seq=_int_or_none(first.get("cut_seq"))) if first and first.get("kind") == FORKED else None
    listed = await sessions.forks(sid)
    # A fork is listed before it is made: keep those that exist (services/router/shell/fork.py).
    states = await sessions.load_many(listed) if listed else []
    forks = [f for f, state in zip(listed, states, strict=True)
             if state is not None and not is_deleted(state) and forked_from_session(stored_state(state)) == sid]
    return {"forked_from": forked_from, "forks": forks}


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _reply_from_transcript(session_id: str, replayed: Replayed) -> SessionGot:
    """`session.get` of a session whose state is gone: as its transcript tallies it
    (`source: "transcript"`): idle, or awaiting the decision its run waits on (the router
    rebuilds that run on its checkpoint at the session's next input)."""
    asked = replayed.pending_approval
    return {
        "v": PROTOCOL_VERSION,
        "session_id": session_id,
        "status": "awaiting_approval" if asked is not None else "idle",
        "profile": (replayed.run_config or {}).get("profile"),
        "turns": replayed.turns,
        "usage": {"input_tokens": replayed.input_tokens, "output_tokens": replayed.output_tokens},
        "cost_usd": None if replayed.cost_unknown else replayed.cost_usd,
        "messages": replayed.history,
        "run_id": asked.get("run_id") if asked is not None else None,
        "runs": replayed.runs,
        "plan": None,
        "checkpoint_id": asked.get("checkpoint_id") if asked is not None else None,
        "user_id": (replayed.run_config or {}).get("user_id"),
        "workspace_id": (replayed.run_config or {}).get("workspace_id"),
        "tools_active": None,
        "phase": open_phase(replayed) if asked is not None else None,
        "activity": "awaiting_approval" if asked is not None else None,
        "source": "transcript",
    }


def open_phase(replayed: Replayed) -> str:
    """The profile phase of the run that waits for a decision, as the router rebuilds it
    from the same events (services/router/core/journal_resume.py): its latest
    `phase.changed`, else `init`, where every run starts (protocol.md)."""
    return next((str(e["to"]) for e in reversed(replayed.open_run)
                 if e.get("kind") == "phase.changed" and e.get("to")), "init")


async def transcript_get(req: TranscriptGetRequest, events: EventLogStore,
                         archive: Archive | None = None) -> dict[str, Any]:
    """A page of the session's stored events (none while it is being deleted: its state is a
    tombstone, shared/contract/session_state.DELETED, and its events go with it)."""
    page = await events.read(req.session_id, after_seq=req.after_seq, limit=req.limit)
    if not page and archive is not None and await events.last_seq(req.session_id) == 0:
        # No counter: the session never was, or Redis lost its log; the events stream knows.
        if await restore_log(req.session_id, events, archive):
            page = await events.read(req.session_id, after_seq=req.after_seq, limit=req.limit)
    reply: dict[str, Any] = {"v": PROTOCOL_VERSION, "events": page}
    if len(page) == req.limit:
        reply["next_after_seq"] = page[-1]["seq"]
    return reply
