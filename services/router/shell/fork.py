"""`<prefix>.api.session.fork`: a new idle session whose history is another's as it stood
at one event (a contract addition, docs/protocol.md "Forking a session").

The router owns session state, so it answers the query (one queue group across its
replicas; with tenants also on `<prefix>.api.<tenant>.session.fork`, for that tenant's
sessions, into its own namespace). One fork:

1. reads the source's transcript (from the events stream when Redis lost it) and, when
   the source is a fork itself, the lineage before it (shared/stores/lineage.py);
2. finds the cut (`fork_point`: at `at_seq`, or inside a run at its last complete turn)
   and replays the events up to it into the history, the tallies and the run settings of
   the run `at_seq` belongs to (shared/stores/transcript.py, the replay a rebuild uses);
3. lists the fork among the source's forks (the source's own keys);
4. copies the memory's compaction summary when it covers only what the fork has, and
   keeps the blobs the history refers to (shared, never copied: shared/stores/fork_copy.py);
5. commits the fork's state, history and first event `session.forked` in one script at
   version 0, in the fork's own keys (its own Redis Cluster slot), and publishes the event.

The commit is last: until it succeeds there is no fork (the forks index is read through the
forks that exist), so a fork cut short anywhere is invisible and the same request again
completes it; one that did complete is answered again as it was while nothing else
happened on it. The source is only read.
"""

from __future__ import annotations

import logging
from typing import Any

from faststream.nats import NatsBroker
from pydantic import ValidationError

from loopwire.shared.contract.event_fields import SessionForkedFields
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.protocol import PROTOCOL_VERSION, SessionForkRequest, error_reply
from loopwire.shared.contract.run_state import RunConfig
from loopwire.shared.contract.session_state import ForkedFrom, SessionState, is_deleted, stored_state
from loopwire.shared.contract.subjects import tenant_of
from loopwire.shared.runtime.bus import event_items
from loopwire.shared.runtime.query_handler import QueryHandler, query_handler
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.fork_copy import copy_compaction, keep_blobs
from loopwire.shared.stores.lineage import FORKED, ForkPoint, fork_point, lineage_events, through
from loopwire.shared.stores.transcript import Archive, Replayed, read_transcript, replay, restore_log

from ..core.executor_profiles import is_executor
from ..core.settings import RouterSettings
from .rebuild import idle_state

log = logging.getLogger("loopwire.router.fork")

FORKS_AT_ONCE = 8
"""Fork requests one router replica works on at the same time."""


class ForkRefused(Exception):
    """The error reply a fork request gets (`code`, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def forked_state(new_sid: str, replayed: Replayed | None, point: ForkPoint, *, source: str,
                 recorded_tools: bool) -> SessionState:
    """The fork's idle state: what the replayed events tally, the run settings of the run
    the fork point belongs to, and where it comes from."""
    state = idle_state(new_sid, replayed) if replayed is not None else SessionState(session_id=new_sid)
    if point.config is not None:
        try:
            state.last_config = RunConfig.model_validate(point.config)
        except ValidationError as exc:  # an older router's config: the replayed one will do
            log.warning("fork %s: the run settings at seq %d are unreadable: %s", new_sid, point.at_seq, exc)
    state.forked_from = ForkedFrom(session_id=source, seq=point.at_seq, cut_seq=point.cut_seq)
    state.tool_recording = source if recorded_tools else None
    return state


def fork_reply(new_sid: str, forked_from: ForkedFrom, *, messages: int, tools: str) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "session_id": new_sid,
            "forked_from": {"session_id": forked_from.session_id, "seq": forked_from.seq},
            # additions
            "cut_seq": forked_from.cut_seq, "messages": messages, "tools": tools}


class ForkQuery:
    """The fork query of one router replica."""

    def __init__(self, ctx: ServiceContext[RouterSettings], archive: Archive | None = None) -> None:
        self.ctx = ctx
        self.archive = archive

    def register(self, broker: NatsBroker) -> None:
        subjects = self.ctx.subjects
        queue = f"{self.ctx.settings.subject_prefix}-router"
        broker.subscriber(subjects.session_fork, queue=queue, max_workers=FORKS_AT_ONCE)(self._handler(False))
        if self.ctx.settings.tenants:
            broker.subscriber(subjects.query("session.fork", tenant="*"), queue=queue,
                              max_workers=FORKS_AT_ONCE)(self._handler(True))

    def _handler(self, tenant_scoped: bool) -> QueryHandler:
        def refused(exc: Exception) -> dict[str, Any] | None:
            return error_reply(exc.code, str(exc)) if isinstance(exc, ForkRefused) else None

        return query_handler("session.fork", SessionForkRequest, lambda req, tenant: self.fork(req),
                             subjects=self.ctx.subjects, settings=self.ctx.settings, tenant_scoped=tenant_scoped,
                             refusal=refused)

    async def fork(self, req: SessionForkRequest) -> dict[str, Any]:
        """Fork `req.session_id` into `req.new_session_id`, or raise ForkRefused."""
        source, new = req.session_id, req.new_session_id
        if tenant_of(source) != tenant_of(new):
            raise ForkRefused("invalid_session_id", f"a fork stays in its source's tenant: {new!r} is not in "
                                                    f"{tenant_of(source) or 'no tenant'}")
        events, sessions = self.ctx.events, self.ctx.sessions
        if is_deleted((await sessions.load(source))[0]):
            raise ForkRefused("unknown_session", f"session {source!r} was deleted")
        own = await read_transcript(source, events) or await restore_log(source, events, self.archive)
        if not own and (await sessions.load(source))[0] is None:
            raise ForkRefused("unknown_session", f"session {source!r} has no state and no transcript")
        last = max(own[-1]["seq"] if own else 0, await events.last_seq(source))
        at = req.at_seq if req.at_seq is not None else (own[-1]["seq"] if own else last)
        if not 1 <= at <= last:
            raise ForkRefused("invalid_seq", f"at_seq must be between 1 and {last}, the last event of {source!r}; "
                                             f"got {at}")
        if new == source:
            raise ForkRefused("session_exists", f"session {new!r} is the source itself")
        point = fork_point(own, at)
        kept = through(await lineage_events(source, events, self.archive, own=own), source, point.cut_seq)
        replayed = replay(new, kept, self.ctx.settings.default_max_tokens, in_order=True) if kept else None
        recorded = req.tools == "recorded"
        state = forked_state(new, replayed, point, source=source, recorded_tools=recorded)
        if recorded and state.last_config is not None and is_executor(state.last_config.profile):
            raise ForkRefused("replay_unsupported", f"profile {state.last_config.profile}: an external agent runs "
                                                    "its own tools, which no recording can answer; fork with "
                                                    "tools 'live'")
        history = replayed.history if replayed is not None else []
        assert state.forked_from is not None
        again = await self._done_before(new, state)
        if again is not None:
            return fork_reply(new, state.forked_from, messages=again, tools=req.tools)
        await sessions.add_fork(source, new)
        await self._share_memory(source, new, history)
        fields: SessionForkedFields = {
            "from_session_id": source, "from_seq": at, "cut_seq": point.cut_seq, "messages": len(history),
            "config": state.last_config.model_dump(mode="json") if state.last_config else None, "tools": req.tools}
        stored = await self._create(new, state, history, fields=fields)
        if stored is None:
            raise ForkRefused("session_exists", f"session {new!r} exists")
        await self.ctx.bus.publish_stored(new, stored)
        log.info("session %s forked from %s at seq %d (cut at %d): %d messages%s", new, source, at, point.cut_seq,
                 len(history), ", recorded tools" if recorded else "")
        return fork_reply(new, state.forked_from, messages=len(history), tools=req.tools)

    async def _done_before(self, new: str, state: SessionState) -> int | None:
        """The new id is taken: by this same fork, made before and untouched since (its
        messages: it is published again and answered as it was), else ForkRefused."""
        raw, _version = await self.ctx.sessions.load(new)
        if raw is None and await self.ctx.events.last_seq(new) == 0:
            return None
        stored = stored_state(raw) if raw is not None else None
        if stored is not None and stored.forked_from == state.forked_from \
                and stored.tool_recording == state.tool_recording and await self.ctx.events.last_seq(new) == 1:
            first = await self.ctx.events.read(new, 0, 1)
            if first and first[0].get("kind") == FORKED:
                await self.ctx.bus.publish_stored(new, [(first[0], False)])
                return stored.history_len
        raise ForkRefused("session_exists", f"session {new!r} exists (it has state or events)")

    async def _share_memory(self, source: str, new: str, history: list[Message]) -> None:
        if not self.ctx.sessions.supports(Capability.PIPELINED_HISTORY):
            return  # in-memory stores: no memory records or blobs in Redis to share
        settings = self.ctx.settings
        await copy_compaction(self.ctx.redis, source, new, history_len=len(history), ttl_s=settings.session_ttl_s)
        await keep_blobs(self.ctx.redis, history, settings.step_result_ttl_s)

    async def _create(self, new: str, state: SessionState, history: list[Message], *,
                      fields: SessionForkedFields) -> list[tuple[AnyEvent, bool]] | None:
        """State, history and `session.forked` at version 0, at once where the stores can;
        None when the session exists."""
        sessions, events = self.ctx.sessions, self.ctx.events
        items = event_items(new, [(None, FORKED, FORKED, fields)])
        if sessions.supports(Capability.COMMIT_WITH_EVENTS) and events.supports(Capability.COMMIT_WITH_EVENTS):
            return await sessions.commit_with_events(new, 0, state.dump_json(), history_len_before=0, append=history, events=items)
        if not await sessions.commit(new, 0, state.dump_json(), history_len_before=0, append=history):
            return None
        return await events.append_many(new, items)
