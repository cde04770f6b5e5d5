"""Forks: where a session is cut, and where a fork's history comes from.

A fork (`<prefix>.api.session.fork`, services/router/shell/fork.py) is a new session whose
history is its source's as it stood at one event. Its transcript starts with
`session.forked` (`from_session_id`, `from_seq`, `cut_seq`, `config`) and holds only what
happened on the fork: the history it started with is the source's events up to
`cut_seq`, read back from the source when the fork has to be rebuilt from its transcript
(`lineage_events`, the same replay as any session, transcript.py).

Where the cut falls, for a fork asked at event `at_seq` (the events up to it, in seq order):

- between runs (after a `run.ended`, before the next `run.started`): at `at_seq`;
- inside a run: after the last complete turn at or before `at_seq`: an answer without
  tool calls, or the last of the results of a turn's tool calls (a `tool.result`, or the
  router's own results in a `user.message`). A turn whose calls are not all answered is
  left out with them, so no tool call is left dangling; a run with no complete turn yet is
  cut before its `run.started`, its input included;
- on a fork, its `session.forked` is a cut of its own (the fork is idle there).

The fork's run settings are those of the run `at_seq` belongs to (its `run.started.config`;
between runs, the last run's), whatever the cut leaves out of that run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import Message, is_tool_result
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.transcript import Archive, read_transcript, restore_log

log = logging.getLogger("loopwire.lineage")

FORKED = "session.forked"
MAX_DEPTH = 64
"""Forks of forks followed at most this deep (ids are never reused, so there is no cycle;
the bound only keeps a damaged transcript from being read without end)."""


@dataclass(frozen=True)
class ForkPoint:
    at_seq: int
    """The event the fork was asked at."""
    cut_seq: int
    """The last event of the source the fork's history includes (0: none of its own)."""
    config: dict[str, Any] | None
    """The run settings of the run `at_seq` belongs to (None: no run names them)."""


def _tool_uses(message: Message) -> set[str]:
    content = message.get("content")
    return {b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use" and "id" in b} \
        if isinstance(content, list) else set()


def _tool_results(message: Message) -> set[str]:
    content = message.get("content")
    return {b["tool_use_id"] for b in content if is_tool_result(b)} if isinstance(content, list) else set()


def fork_point(events: list[AnyEvent], at_seq: int) -> ForkPoint:
    """Where a fork of a session asked at `at_seq` cuts its `events` (its own, in seq order)."""
    cut = 0
    config: dict[str, Any] | None = None
    in_run = False
    waiting: set[str] = set()
    answer: tuple[Any, Any, int] | None = None
    """(run_id, turn, the cut before it) of the latest answer: a `retracted` of that turn
    takes it out of the history again (transcript.py), and the cut back to before it."""
    for event in events:
        seq = int(event.get("seq", 0))
        if seq > at_seq:
            break
        kind = event["kind"]
        if event["kind"] == "run.started":
            in_run, waiting = True, set()
            config = event.get("config") or config
        elif kind == "run.ended":
            in_run, waiting = False, set()
        elif event["kind"] == "session.forked":
            in_run, waiting = False, set()
            config = event.get("config") or config
        elif in_run and event["kind"] == "message":
            message = event.get("message") or {}
            if message.get("content"):
                answer = (event.get("run_id"), event.get("turn"), cut)
                waiting = _tool_uses(message)
                if not waiting:
                    cut = seq  # an answer: a complete turn
            continue
        elif in_run and event["kind"] == "retracted":
            if answer is not None and answer[:2] == (event.get("run_id"), event.get("turn")):
                cut, waiting, answer = answer[2], set(), None
            continue
        elif in_run and waiting and kind in ("tool.result", "user.message"):
            answered = {event.get("tool_use_id")} if event["kind"] == "tool.result" else \
                _tool_results(event.get("message") or {}) if event["kind"] == "user.message" else set()
            if waiting & answered:
                waiting -= answered
                if not waiting:
                    cut = seq  # the turn's last result: complete
            continue
        if not in_run:
            cut = seq
    return ForkPoint(at_seq=at_seq, cut_seq=cut, config=config)


def through(events: list[AnyEvent], session_id: str, cut_seq: int) -> list[AnyEvent]:
    """A lineage's events (several sessions', in order) with `session_id`'s own cut at
    `cut_seq`: what a fork of it at that cut starts from."""
    return [e for e in events if e.get("session_id") != session_id or int(e.get("seq", 0)) <= cut_seq]


async def lineage_events(sid: str, events_store: EventLogStore, archive: Archive | None = None,
                         *, own: list[AnyEvent] | None = None, depth: int = 0) -> list[AnyEvent]:
    """The events whose replay, in this order, is the session's history: a fork's source's
    up to the fork's cut (the source's own lineage first, when it is a fork too), then the
    session's own (`own`, when read already; else read here, from the events stream when
    Redis lost them). A source whose transcript is gone leaves only the fork's own events."""
    if own is None:
        own = await read_transcript(sid, events_store) or await restore_log(sid, events_store, archive)
    own = sorted(own, key=lambda e: int(e.get("seq", 0)))  # the events stream's order may be crossed
    if not own:
        return own
    first = own[0]
    if first["kind"] != "session.forked":
        return own
    source = first.get("from_session_id")
    if not isinstance(source, str) or depth >= MAX_DEPTH:
        log.warning("session %s: its fork's source cannot be followed (%r, depth %d)", sid, source, depth)
        return own
    ancestry = await lineage_events(source, events_store, archive, depth=depth + 1)
    if not ancestry:
        log.warning("session %s: its source %s has no transcript left; the history it was forked with is lost",
                    sid, source)
        return own
    cut = first.get("cut_seq")
    if not isinstance(cut, int):
        cut = fork_point([e for e in ancestry if e.get("session_id") == source], int(first.get("from_seq", 0))).cut_seq
    return through(ancestry, source, cut) + own
