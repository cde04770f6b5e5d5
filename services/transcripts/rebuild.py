"""A session rebuilt from its transcript alone: the transcript is the source of truth.

The router's Redis state (`lw:s:<sid>`, `lw:h:<sid>`) is a cache of what the event log
says. When it is gone (deleted, evicted, lost with a Redis that kept its streams) but the
transcript is there, `rebuild_session` reconstructs the history and a minimal idle state
and stores them (a compare-and-set on version 0, so it never overwrites a session that
exists), and the next input continues the conversation with its history.

Which events make the history, in `seq` order:

| event | history |
|---|---|
| `user.message` (addition) | a message the model did not write: the run's input, follow-ups, steering, the router's own notes, tool results it made itself (cancelled, missing); a tool_result block without `content` stands for its `tool.result` event |
| `message` | the assistant message (when it has content); its tool_use blocks wait for results |
| `tool.result` | the result of one waiting tool_use |
| the next message, or `run.ended` | the waiting tool_uses' results, in the model's order, as one user message; a call without a result gets the error result the router gives it |

Consecutive user messages are merged (steering rides in the tool results' message, as
the router does it). The state is idle: a run in flight when the state was lost is over
(its late results are stale to the router). `run.started.config` (addition) gives the
rebuilt session what its last run was started with (profile, models, max_tokens and
temperature, tools and their permissions, limits, system prompt, strategy, metadata), so
a `message` on it starts the next run with the same settings; without it, the profile
and the last model used.

When Redis lost the event log as well (all of its data), the transcript's second copy is
the LOOPWIRE_EVENTS stream (shared/stores/event_archive.py): `rebuild_session` reads it there,
puts the log back in Redis with its own seqs (`EventLogStore.restore`: `transcript.get`
answers again and the next event's seq follows the last one, never reusing one) and
rebuilds from it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.session_store import SessionStore

log = logging.getLogger("loopwire.transcripts.rebuild")

STATE_SCHEMA = 1
"""The router's session state schema this module writes (services/router/state.py)."""
PAGE = 1000
NO_RESULT = "no result was returned for this call"
RUN_ENDED = "not executed: the run ended ({status})"


@dataclass
class Rebuilt:
    history: list[dict[str, Any]]
    state: dict[str, Any]
    last_seq: int


@dataclass
class _Builder:
    session_id: str
    default_max_tokens: int
    history: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    """tool_use ids of the latest assistant message, in the model's order."""
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
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

    def append(self, message: dict[str, Any]) -> None:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if not blocks:
            return
        role = message.get("role", "user")
        if self.history and self.history[-1]["role"] == role == "user":
            self.history[-1] = {"role": "user", "content": [*self.history[-1]["content"], *blocks]}
        else:
            self.history.append({"role": role, "content": blocks})

    def settle(self, reason: str) -> None:
        """The waiting tool_uses get their results (or an error result) as one user message."""
        if not self.waiting:
            return
        blocks = []
        for tid in self.waiting:
            block = self.results.get(tid) or {"type": "tool_result", "tool_use_id": tid, "is_error": True,
                                              "content": reason}
            blocks.append(block)
        self.waiting, self.results = [], {}
        self.append({"role": "user", "content": blocks})

    def user_message(self, message: dict[str, Any]) -> None:
        """A message the router appended. Its tool_result blocks answer the waiting
        tool_uses: one without `content` points at its `tool.result` event."""
        content = message.get("content")
        if message.get("role", "user") != "user" or not isinstance(content, list):
            self.settle(NO_RESULT)
            self.append({"role": message.get("role", "user"), "content": content})
            return
        given = {b["tool_use_id"]: b for b in content
                 if isinstance(b, dict) and b.get("type") == "tool_result" and "tool_use_id" in b}
        others = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
        blocks = []
        for tid in self.waiting:  # in the model's order, as the router sends them
            block = given.get(tid)
            if block is not None and "content" in block:
                blocks.append(block)
            else:
                blocks.append(self.results.get(tid) or {"type": "tool_result", "tool_use_id": tid, "is_error": True,
                                                        "content": NO_RESULT})
        # Results for tool_uses that are not waiting would be orphans the API rejects.
        self.waiting, self.results = [], {}
        self.append({"role": "user", "content": blocks + others})

    def take(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "run.started":
            self.settle(NO_RESULT)
            self.runs += 1
            self.profile = event.get("profile") or self.profile
            self.config = event.get("config") or self.config
            self.open_run = {"input_tokens": 0, "output_tokens": 0}
        elif kind == "user.message":
            self.user_message(event.get("message") or {})
        elif kind == "message":
            self.settle(NO_RESULT)
            message = event.get("message") or {}
            self.turns += 1
            self.last_model = event.get("model") or self.last_model
            usage = event.get("usage") or {}
            for name in self.open_run:
                self.open_run[name] += int(usage.get(name, 0) or 0)
            if message.get("content"):
                self.append({"role": "assistant", "content": message["content"]})
                self.waiting = [b["id"] for b in message["content"]
                                if isinstance(b, dict) and b.get("type") == "tool_use" and "id" in b]
        elif kind == "tool.result":
            tid = event.get("tool_use_id")
            if tid in self.waiting:
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": event.get("content", "")}
                if event.get("is_error"):
                    block["is_error"] = True
                self.results[tid] = block
        elif kind == "run.ended":
            self.settle(RUN_ENDED.format(status=event.get("status", "ended")))
            usage = event.get("usage") or {}
            self.input_tokens += int(usage.get("input_tokens", 0) or 0)
            self.output_tokens += int(usage.get("output_tokens", 0) or 0)
            self.cost_usd += float(event.get("cost_usd", 0.0) or 0.0)
            self.cost_unknown = self.cost_unknown or ("cost_usd" in event and event["cost_usd"] is None)
            self.open_run = {"input_tokens": 0, "output_tokens": 0}

    def last_config(self) -> dict[str, Any] | None:
        if self.config:
            return dict(self.config)
        if self.profile is None:
            return None
        return {"profile": self.profile, "models": [self.last_model] if self.last_model else [],
                "max_tokens": self.default_max_tokens}

    def state(self) -> dict[str, Any]:
        config = self.last_config()
        if config is not None and not config.get("models"):
            config = None  # the router's defaults are better than a config without a model
        return {
            "schema": STATE_SCHEMA, "session_id": self.session_id, "status": "idle", "run": None,
            "last_config": config, "history_len": len(self.history), "runs": self.runs, "turns": self.turns,
            "usage": {"input_tokens": self.input_tokens + self.open_run["input_tokens"],
                      "output_tokens": self.output_tokens + self.open_run["output_tokens"],
                      "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            "cost_usd": round(self.cost_usd, 8), "cost_unknown": self.cost_unknown, "queued": [], "steering": [], "recent_inputs": [], "outbox": [],
            "outbox_input": None,
        }


def reconstruct(session_id: str, events: list[dict[str, Any]], default_max_tokens: int = 4096) -> Rebuilt | None:
    """The history and idle state the events describe; None when no run ever started
    (a session that only ever had rejected input has nothing to rebuild)."""
    builder = _Builder(session_id, default_max_tokens)
    for event in sorted(events, key=lambda e: e.get("seq", 0)):
        builder.take(event)
    builder.settle(NO_RESULT)
    if builder.runs == 0 or not builder.history:
        return None
    if builder.history[0]["role"] != "user":
        # No `user.message` events (written before they existed): the user's side of the
        # conversation is not in the transcript, and a history without it is no history.
        log.warning("session %s: the transcript holds no user messages; it cannot be rebuilt", session_id)
        return None
    return Rebuilt(history=builder.history, state=builder.state(), last_seq=max(e.get("seq", 0) for e in events))


async def read_transcript(sid: str, events: EventLogStore) -> list[dict[str, Any]]:
    """Every stored event of the session, page by page."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await events.read(sid, after_seq=after, limit=PAGE)
        out.extend(page)
        if len(page) < PAGE:
            return out
        after = page[-1]["seq"]


Archive = Callable[[str], Awaitable[list[dict[str, Any]]]]
"""A session's events from the events stream (shared/stores/event_archive.py `read_archive`)."""


async def restore_log(sid: str, events_store: EventLogStore, archive: Archive | None) -> list[dict[str, Any]]:
    """A session's events from the events stream, put back into the event log (which
    must be empty: `EventLogStore.restore` writes nothing into a log that has events)."""
    if archive is None:
        return []
    events = await archive(sid)
    if events and await events_store.restore(sid, events):
        log.info("session %s: event log restored from the events stream (%d events, up to seq %d)", sid,
                 len(events), events[-1]["seq"])
    return events


async def rebuild_session(sid: str, events_store: EventLogStore, sessions_store: SessionStore,
                          default_max_tokens: int = 4096, archive: Archive | None = None) -> dict[str, Any] | None:
    """Rebuild a session whose state is missing from its transcript and store it.

    Returns the stored state, or None when there is nothing to rebuild (no transcript,
    no run in it) or the session exists (its state is kept; nothing is overwritten).
    With `archive`, a session whose event log is gone from Redis too is rebuilt from the
    events stream, and its log restored first. Call it where a missing state would
    otherwise start a new session."""
    raw, _version = await sessions_store.load(sid)
    if raw is not None:
        return None
    events = await read_transcript(sid, events_store) or await restore_log(sid, events_store, archive)
    rebuilt = reconstruct(sid, events, default_max_tokens)
    if rebuilt is None:
        return None
    if not await sessions_store.commit(sid, 0, rebuilt.state, 0, rebuilt.history):
        return None  # created meanwhile (another replica rebuilt it, or a new input won)
    log.info("session %s rebuilt from its transcript: %d messages, %d runs (up to seq %d)", sid,
             len(rebuilt.history), rebuilt.state["runs"], rebuilt.last_seq)
    return rebuilt.state
