"""A session rebuilt from its transcript alone: the transcript is the source of truth.

The router's Redis state (keys.session_state, keys.session_history) is a cache of what the event log
says. When it is gone (deleted, evicted, lost with a Redis that kept its streams) but the
transcript is there, `rebuild_session` replays the events into the history
(shared/stores/transcript.py), makes a minimal idle `SessionState` of what they tally,
and stores both (a compare-and-set on version 0, so it never overwrites a session that
exists); the next input continues the conversation with its history.

The state is idle: a run in flight when the state was lost is over (its late results are
stale), unless it waits for a decision: then it is rebuilt paused on its checkpoint, with
its batch (journal_resume.py), and the session is `awaiting_approval`, so the `decision`
runs exactly the stored calls. Its `last_config` is what the last run was started with
(`run.started.config`), so a `message` on an idle one starts the next run with the same
settings; without it, the profile and the last model used.

A fork's transcript starts with `session.forked` and holds only what happened on it: its
history before that is its source's, read there (shared/stores/lineage.py), so a fork is
rebuilt as whole as any session while its source's transcript lasts.

When Redis lost the event log as well (all of its data), the transcript's second copy is
the LOOPWIRE_EVENTS stream (shared/stores/event_archive.py): `rebuild_session` reads it
there, puts the log back in Redis with its own seqs and rebuilds from it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.run_state import RunConfig
from loopwire.shared.contract.session_state import ForkedFrom, SessionState
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.lineage import lineage_events
from loopwire.shared.stores.session_store import SessionStore
from loopwire.shared.stores.transcript import Archive, Replayed, replay

from ..core.journal_resume import Prices, plan_of, resumed_run

log = logging.getLogger("loopwire.router.rebuild")


@dataclass
class Rebuilt:
    history: list[Message]
    state: dict[str, Any]
    """The idle `SessionState`, dumped as the session store keeps it."""
    last_seq: int


def idle_state(session_id: str, replayed: Replayed) -> SessionState:
    """The idle state a replayed transcript describes."""
    config = None
    if replayed.run_config is not None:
        try:
            config = RunConfig.model_validate(replayed.run_config)
        except ValidationError as exc:  # an older router's config: the defaults will do
            log.warning("session %s: the last run's config is unreadable, the defaults apply: %s", session_id, exc)
    return SessionState(session_id=session_id, status="idle", last_config=config,
                        history_len=len(replayed.history), runs=replayed.runs, turns=replayed.turns,
                        usage=Usage(input_tokens=replayed.input_tokens, output_tokens=replayed.output_tokens),
                        cost_usd=replayed.cost_usd, cost_unknown=replayed.cost_unknown)


def reconstruct(session_id: str, events: list[AnyEvent], *, default_max_tokens: int = 4096,
                prices: Prices | None = None, in_order: bool = False) -> Rebuilt | None:
    """The history and state the events describe (idle, or paused on the checkpoint its
    run waits on); None when no run ever started (a session that only ever had rejected
    input has nothing to rebuild). `in_order`: `events` is a lineage (a fork's source's
    events, then its own: lineage.py)."""
    replayed = replay(session_id, events, default_max_tokens, in_order=in_order)
    if replayed is None:
        return None
    state = idle_state(session_id, replayed)
    # Not in idle_state: a fork is made with it too, and a fork's first inputs are a new
    # session's, whose backlog is read from the ack floor (shell/ingress_order.py).
    state.rebuilt = True
    state.plan = plan_of(events)
    run = resumed_run(replayed.pending_approval, replayed.open_run, replayed.last_seq, prices=prices)
    if run is not None:
        state.run, state.status = run, "awaiting_approval"
        state.last_config = run.config
        state.cost_usd += run.budget.cost_usd
        state.cost_unknown = state.cost_unknown or bool(run.budget.unpriced)
    forked = next((e for e in events if e.get("session_id") == session_id), None)
    if forked is not None and forked["kind"] == "session.forked":
        # A fork keeps where it comes from, and a replay's recorded tools.
        source = str(forked.get("from_session_id"))
        state.forked_from = ForkedFrom(session_id=source, seq=int(forked.get("from_seq", 0)),
                                       cut_seq=int(forked.get("cut_seq") or 0))
        state.tool_recording = source if forked.get("tools") == "recorded" else None
    return Rebuilt(history=replayed.history, state=state.dump(), last_seq=replayed.last_seq)


async def rebuild_session(sid: str, events_store: EventLogStore, sessions_store: SessionStore, *,
                          default_max_tokens: int = 4096, archive: Archive | None = None,
                          prices: Prices | None = None) -> dict[str, Any] | None:
    """Rebuild a session whose state is missing from its transcript and store it.

    Returns the stored state, or None when there is nothing to rebuild (no transcript,
    no run in it) or the session exists (its state is kept; nothing is overwritten).
    With `archive`, a session whose event log is gone from Redis too is rebuilt from the
    events stream, and its log restored first. Call it where a missing state would
    otherwise start a new session."""
    raw, _version = await sessions_store.load(sid)
    if raw is not None:
        return None
    events = await lineage_events(sid, events_store, archive)
    rebuilt = reconstruct(sid, events, default_max_tokens=default_max_tokens, prices=prices, in_order=True)
    if rebuilt is None:
        return None
    if not await sessions_store.commit(sid, 0, rebuilt.state, history_len_before=0, append=rebuilt.history):
        return None  # created meanwhile (another replica rebuilt it, or a new input won)
    log.info("session %s rebuilt from its transcript: %d messages, %d runs (up to seq %d), %s", sid,
             len(rebuilt.history), rebuilt.state["runs"], rebuilt.last_seq, rebuilt.state["status"])
    return rebuilt.state
