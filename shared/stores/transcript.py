"""A session's transcript as the event log holds it: read, restored, replayed.

The event log (keys.event_stream, event_log.py) is the source of truth of a session; the
router's Redis state is a cache of what it says. Two services read a session back from
it: the router rebuilds a session whose state is gone (services/router/shell/rebuild.py), and
the transcripts service answers `session.get` from it meanwhile. Both replay the events
here into the conversation they describe.

Which events make the history, in `seq` order:

| event | history |
|---|---|
| `user.message` (loopwire's addition, docs/protocol.md) | a message the model did not write: the run's input, follow-ups, steering, the router's own notes, tool results it made itself (cancelled, missing); a tool_result block without `content` stands for its `tool.result` event |
| `message` | the assistant message (when it has content); its tool_use blocks wait for results |
| `retracted` of that message's turn | the message was never stored (a vacuous answer retried, a looping turn the loop ladder redirected): it leaves the history, and its calls wait for nothing |
| `tool.result` | the result of one waiting tool_use |
| the next message, or `run.ended` | the waiting tool_uses' results, in the model's order, as one user message; a call without a result gets the error result the router gives it |
| `session.forked` (loopwire's addition, docs/protocol.md) | nothing: a fork's history up to it is its source's (lineage.py reads it there); its `config` is the fork's run settings |

Consecutive user messages are merged (steering rides in the tool results' message, as
the router does it). A run without its `run.ended` is over (its late results are stale),
unless it waits for a decision: its last step is an `approval.requested` (not an
external agent's, whose agent is gone with its step) that nothing answered since: no
`approval.decided`, message, result, retraction, phase change or end after it. Then the run is open
(`Replayed.open_run`, its events; `pending_approval`, that event) and the calls of its
last message still wait for their results: the history leaves them unanswered, as the
router's own history does while a checkpoint is open, so that the decision can run
exactly those calls (services/router/core/journal_resume.py).
`run.started.config` (loopwire's addition, docs/protocol.md) is what the last run was started with (profile, models,
max_tokens and temperature, tools and their permissions, limits, system prompt,
strategy, metadata); without it, the profile and the last model used.

When Redis lost the event log as well (all of its data), the transcript's second copy is
the LOOPWIRE_EVENTS stream (event_archive.py): `restore_log` reads it there and puts the
log back in Redis with its own seqs (`EventLogStore.restore`: `transcript.get` answers
again and the next event's seq follows the last one, never reusing one).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.events import AnyEvent, ApprovalRequestedEvent, RetractedEvent
from loopwire.shared.contract.messages import (
    ContentBlock,
    Message,
    as_blocks,
    is_tool_result,
    text_block,
    tool_result_block,
)
from loopwire.shared.stores.event_log import EventLogStore

log = logging.getLogger("loopwire.transcript")

PAGE = 1000
NO_RESULT = "no result was returned for this call"
RUN_ENDED = "not executed: the run ended ({status})"
ANSWERED_BY = frozenset({"approval.decided", "message", "user.message", "tool.result", "retracted",
                         "phase.changed", "run.ended"})
"""Events after an `approval.requested` that show the run no longer waits on it (its
decision applied, a steer that withdrew the checkpoint, the run's end)."""


@dataclass
class Replayed:
    """What a session's events say: its conversation and its tallies."""

    history: list[Message]
    runs: int
    turns: int
    input_tokens: int
    """Of every run, the one without a `run.ended` included."""
    output_tokens: int
    cost_usd: float
    cost_unknown: bool
    """Some run's cost was null (a model without a known price)."""
    run_config: dict[str, Any] | None
    """What the last run was started with; None when the events do not name its models."""
    last_seq: int
    open_run: list[AnyEvent] = field(default_factory=list)
    """The events of the last run, from its `run.started`, when it waits for a decision."""
    pending_approval: ApprovalRequestedEvent | None = None
    """The `approval.requested` that run waits on."""


@dataclass
class _Builder:
    session_id: str
    default_max_tokens: int
    history: list[Message] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    """tool_use ids of the latest assistant message, in the model's order."""
    results: dict[str, ContentBlock] = field(default_factory=dict)
    runs: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown: bool = False
    open_run: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    """Usage of the run without a `run.ended` yet (its total is not in any event)."""
    profile: str | None = None
    config: dict[str, Any] | None = None
    last_model: str | None = None
    last_message: tuple[str | None, int, int] | None = None
    """(run_id, turn, index in the history) of the latest assistant message appended."""
    run_events: list[AnyEvent] = field(default_factory=list)
    """The events of the run in progress (since its `run.started`; emptied at its end)."""

    def append(self, message: Message) -> None:
        content = message.get("content")
        blocks = [text_block(content)] if isinstance(content, str) else list(content or [])
        if not blocks:
            return
        role = message.get("role", "user")
        if self.history and self.history[-1]["role"] == role == "user":
            self.history[-1] = {"role": "user", "content": [*as_blocks(self.history[-1]["content"]), *blocks]}
        else:
            self.history.append({"role": role, "content": blocks})

    def settle(self, reason: str) -> None:
        """The waiting tool_uses get their results (or an error result) as one user message."""
        if not self.waiting:
            return
        blocks = []
        for tid in self.waiting:
            block = self.results.get(tid) or tool_result_block(tid, reason, is_error=True)
            blocks.append(block)
        self.waiting, self.results = [], {}
        self.append({"role": "user", "content": blocks})

    def user_message(self, message: Message) -> None:
        """A message the router appended. Its tool_result blocks answer the waiting
        tool_uses: one without `content` points at its `tool.result` event."""
        content = message.get("content")
        if message.get("role", "user") != "user" or not isinstance(content, list):
            self.settle(NO_RESULT)
            if content is not None:  # (a message without content adds nothing)
                self.append({"role": message.get("role", "user"), "content": content})
            return
        given = {b["tool_use_id"]: b for b in content if is_tool_result(b)}
        others = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
        blocks = []
        for tid in self.waiting:  # in the model's order, as the router sends them
            block = given.get(tid)
            if block is not None and "content" in block:
                blocks.append(block)
            else:
                blocks.append(self.results.get(tid) or tool_result_block(tid, NO_RESULT, is_error=True))
        # Results for tool_uses that are not waiting would be orphans the API rejects.
        self.waiting, self.results = [], {}
        self.append({"role": "user", "content": blocks + others})

    def retract(self, event: RetractedEvent) -> None:
        """A `retracted` of the latest assistant message's turn: the router did not store
        it. (A steer's `retracted` names the generation in flight, which has no message.)"""
        latest = self.last_message
        if latest is None or (latest[0], latest[1]) != (event.get("run_id"), event.get("turn")) \
                or latest[2] != len(self.history) - 1:
            return
        self.history.pop()
        self.waiting, self.results, self.last_message = [], {}, None

    def take(self, event: AnyEvent) -> None:
        if event["kind"] == "run.started":
            self.run_events = []
        self.run_events.append(event)
        if event["kind"] == "run.started":
            self.settle(NO_RESULT)
            self.runs += 1
            self.profile = event.get("profile") or self.profile
            self.config = event.get("config") or self.config
            self.open_run = {"input_tokens": 0, "output_tokens": 0}
        elif event["kind"] == "user.message":
            self.user_message(event.get("message") or {})
        elif event["kind"] == "message":
            self.settle(NO_RESULT)
            message = event.get("message") or {}
            self.turns += 1
            self.last_model = event.get("model") or self.last_model
            usage = event.get("usage") or {}
            self.open_run["input_tokens"] += int(usage.get("input_tokens", 0) or 0)
            self.open_run["output_tokens"] += int(usage.get("output_tokens", 0) or 0)
            if message.get("content"):
                self.append({"role": "assistant", "content": message["content"]})
                self.last_message = (event.get("run_id"), event.get("turn", 0), len(self.history) - 1)
                self.waiting = [b["id"] for b in message["content"]
                                if isinstance(b, dict) and b.get("type") == "tool_use" and "id" in b]
        elif event["kind"] == "retracted":
            self.retract(event)
        elif event["kind"] == "session.forked":
            self.settle(NO_RESULT)
            self.config = event.get("config") or self.config
            self.profile = (self.config or {}).get("profile") or self.profile
        elif event["kind"] == "tool.result":
            tid = event.get("tool_use_id")
            if tid in self.waiting:
                self.results[tid] = tool_result_block(tid, event.get("content", ""), is_error=bool(event.get("is_error")))
        elif event["kind"] == "run.ended":
            self.settle(RUN_ENDED.format(status=event.get("status", "ended")))
            usage = event.get("usage") or {}
            self.input_tokens += int(usage.get("input_tokens", 0) or 0)
            self.output_tokens += int(usage.get("output_tokens", 0) or 0)
            self.cost_usd += float(event.get("cost_usd", 0.0) or 0.0)
            self.cost_unknown = self.cost_unknown or ("cost_usd" in event and event["cost_usd"] is None)
            self.open_run = {"input_tokens": 0, "output_tokens": 0}
            self.run_events = []

    def pending_approval(self) -> ApprovalRequestedEvent | None:
        """The `approval.requested` the run in progress waits on, if it waits on one."""
        for event in reversed(self.run_events):
            if event["kind"] == "approval.requested":
                return event if event.get("source") != "executor" else None
            if event["kind"] in ANSWERED_BY:
                return None
        return None

    def last_config(self) -> dict[str, Any] | None:
        if self.config:
            return dict(self.config)
        if self.profile is None:
            return None
        return {"profile": self.profile, "models": [self.last_model] if self.last_model else [],
                "max_tokens": self.default_max_tokens}

    def run_config(self) -> dict[str, Any] | None:
        config = self.last_config()
        if config is not None and not config.get("models"):
            return None  # the router's defaults are better than a config without a model
        return config


def replay(session_id: str, events: list[AnyEvent], default_max_tokens: int = 4096,
           *, in_order: bool = False) -> Replayed | None:
    """The conversation and tallies the events describe; None when no run ever started
    (a session that only ever had rejected input has nothing to replay). `in_order`: the
    events are in the order to replay them already (a fork's lineage, lineage.py, holds
    several sessions' seqs), else they are sorted by seq."""
    builder = _Builder(session_id, default_max_tokens)
    for event in events if in_order else sorted(events, key=lambda e: e.get("seq", 0)):
        builder.take(event)
    pending = builder.pending_approval()
    if pending is None:
        builder.settle(NO_RESULT)
    if builder.runs == 0 or not builder.history:
        return None
    if builder.history[0]["role"] != "user":
        # No `user.message` events (written before they existed): the user's side of the
        # conversation is not in the transcript, and a history without it is no history.
        log.warning("session %s: the transcript holds no user messages; it cannot be rebuilt", session_id)
        return None
    return Replayed(history=builder.history, runs=builder.runs, turns=builder.turns,
                    input_tokens=builder.input_tokens + builder.open_run["input_tokens"],
                    output_tokens=builder.output_tokens + builder.open_run["output_tokens"],
                    cost_usd=round(builder.cost_usd, 8), cost_unknown=builder.cost_unknown,
                    run_config=builder.run_config(),
                    last_seq=events[-1].get("seq", 0) if in_order else max(e.get("seq", 0) for e in events),
                    open_run=list(builder.run_events) if pending is not None else [], pending_approval=pending)


async def read_transcript(sid: str, events: EventLogStore) -> list[AnyEvent]:
    """Every stored event of the session, page by page."""
    out: list[AnyEvent] = []
    after = 0
    while True:
        page = await events.read(sid, after_seq=after, limit=PAGE)
        out.extend(page)
        if len(page) < PAGE:
            return out
        after = page[-1]["seq"]


Archive = Callable[[str], Awaitable[list[AnyEvent]]]
"""A session's events from the events stream (shared/stores/event_archive.py `read_archive`)."""


async def restore_log(sid: str, events_store: EventLogStore, archive: Archive | None) -> list[AnyEvent]:
    """A session's events from the events stream, put back into the event log (which
    must be empty: `EventLogStore.restore` writes nothing into a log that has events)."""
    if archive is None:
        return []
    events = await archive(sid)
    if events and await events_store.restore(sid, events):
        log.info("session %s: event log restored from the events stream (%d events, up to seq %d)", sid,
                 len(events), events[-1]["seq"])
    return events
