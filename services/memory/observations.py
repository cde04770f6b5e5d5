"""The memory hierarchy: observations after every N turns, reflections after every M
observations, hydrated into later generations as a section of the system prompt.

    history ──N model turns──▶ observation ("what is worth remembering from these turns")
    observations ──M of them──▶ reflection ("what they add up to")

Both are written off the critical path: the assemble handler publishes its request and
acks first, then pokes the `Observer`, which runs in a background task (one per session
at a time, one replica at a time through a Redis lock). A process that dies mid-way
loses nothing: the trigger is a count (`observed_to` in the session's memory meta), so
the next generation's poke finds the same turns unobserved and writes the observation
then; the model call is recorded under a step id derived from the span, so it is not
paid twice. Observations are stored per session, and per strategy actor when the run has
one (`strategy.actor`), so an actor's later sessions start with what it learned. Each is
visible in the transcript as a `memory.observation` / `memory.reflection` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.codec import now_rfc3339
from loopwire.shared.contract.envelopes import AssembleContext, Usage
from loopwire.shared.contract.event_fields import MemoryObservationFields, MemoryReflectionFields
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.session_state import is_deleted
from loopwire.shared.runtime.lru import LruCache
from loopwire.shared.stores.session_store import SessionStore

from .compaction import render_transcript
from .store import MemoryStore, Note, ObservationState, Snapshot

log = logging.getLogger("loopwire.memory.observations")

OBSERVATION_SYSTEM = (
    "You keep the long-term memory of an AI assistant. From the conversation excerpt, write the "
    "few observations worth remembering later: facts about the user and their goals, preferences, "
    "decisions, results reached, and what is still open. One short line each, most important first, "
    "no preamble. Skip what the earlier observations already say."
)
REFLECTION_SYSTEM = (
    "You keep the long-term memory of an AI assistant. From its recent observations, write a short "
    "reflection: what they add up to (patterns, the user's intent, lessons, what to do next). "
    "A few lines, no preamble."
)
OBSERVATION_MAX_TOKENS = 400
REFLECTION_MAX_TOKENS = 400
MAX_EXCERPT_CHARS = 60_000
"""The newest part of the excerpt is kept when the turns are longer than this."""
LOCK_TTL_S = 300
RECENT_NOTES = 5
"""The observations written before that an observation's request shows the model."""
SEEN_SESSIONS = 4096
"""Sessions whose last known `observed_to` the observer keeps in process."""

Complete = Callable[[AssembleContext, str, str, list[Message], int], Awaitable[tuple[str, Usage]]]
"""(env, step_id, system, messages, max_tokens) -> (text, usage): LlmSummarizer.complete."""
Emit = Callable[..., Awaitable[Any]]
Read = tuple[int, list[Message]]
"""(index of the first, messages): a contiguous part of a session's history already read."""
"""Bus.emit."""


# -- pure: triggers, prompts, hydration ------------------------------------------------------------
def model_turns(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def observation_request(messages: list[Message], earlier: list[Note]) -> list[Message]:
    excerpt = render_transcript(messages)
    if len(excerpt) > MAX_EXCERPT_CHARS:
        excerpt = "[...]\n" + excerpt[-MAX_EXCERPT_CHARS:]
    parts = []
    if earlier:
        parts.append("<earlier-observations>\n" + "\n".join(o["text"] for o in earlier) + "\n</earlier-observations>")
    parts.append(f"<conversation-excerpt>\n{excerpt}\n</conversation-excerpt>")
    parts.append("Write the new observations.")
    return [{"role": "user", "content": [{"type": "text", "text": "\n\n".join(parts)}]}]


def reflection_request(observations: list[Note]) -> list[Message]:
    listed = "\n".join(f"- {o['text']}" for o in observations)
    text = f"<observations>\n{listed}\n</observations>\n\nWrite the reflection."
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


def memory_section(snap: Snapshot, max_chars: int) -> str | None:
    """The system-prompt section with what the session (and its actor) remembers; the
    oldest items give way first when it would exceed `max_chars`."""
    groups = [("Reflections", snap.reflections), ("Observations", snap.observations),
              ("From earlier sessions", snap.actor_reflections + snap.actor_observations)]
    lines: list[tuple[str, str]] = [(title, item["text"]) for title, items in groups for item in items
                                    if item.get("text")]
    while lines and sum(len(t) + 3 for _, t in lines) > max_chars:
        # Drop the oldest of the largest group first.
        counts: dict[str, int] = {}
        for title, _ in lines:
            counts[title] = counts.get(title, 0) + 1
        biggest = max(counts, key=lambda k: counts[k])
        lines.remove(next(x for x in lines if x[0] == biggest))
    if not lines:
        return None
    out = ["<memory>"]
    for title, _ in groups:
        items = [t for g, t in lines if g == title]
        if items:
            out.append(f"{title}:")
            out.extend(f"- {t}" for t in items)
    out.append("</memory>")
    return "\n".join(out)


# -- the background worker ------------------------------------------------------------------------
class Observer:
    def __init__(self, store: MemoryStore, sessions: SessionStore, complete: Complete, *, emit: Emit,
                 every_turns: int, reflect_every: int) -> None:
        self.store = store
        self.sessions = sessions
        self.complete = complete
        self.emit = emit
        self.every_turns = every_turns
        self.reflect_every = reflect_every
        self._running: dict[str, asyncio.Task[None]] = {}
        self._latest: dict[str, tuple[AssembleContext, Read | None]] = {}
        """A poke that came while the session's task ran: the task looks again with it."""
        self._seen: LruCache[str, tuple[int, int, int]] = LruCache(SEEN_SESSIONS)
        """Per session: (observed_to as last read, history scanned up to, model turns in
        between). `observed_to` only grows (any replica moves it forward), so the copy can
        only be behind, and the turns since it include the turns since the stored value:
        when even they are too few, the stored value would say so too, and nothing is read
        (the history's committed messages never change, so a counted part is not read again)."""

    def poke(self, env: AssembleContext, read: Read | None = None) -> None:
        """Called after a generation's request went out: check the triggers in the
        background (never delaying the request). `read`: (first index, messages) of the
        history the assembly just read, which the count of model turns uses instead of
        reading it again."""
        sid = env.session_id
        if self.every_turns <= 0:
            return
        if sid in self._running:
            self._latest[sid] = (env, read)
            return
        counts = self._counts(sid, env.history_len)
        if counts is not None and self._too_few(counts, env.history_len):
            return  # what `run` would find first, without a task for it (most generations)
        self._running[sid] = asyncio.create_task(self._guarded(env, read))

    async def idle(self) -> None:
        """Wait for the background work in flight (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)
            for sid, task in list(self._running.items()):
                if task.done():  # e.g. cancelled before it started: it never cleared its entry
                    del self._running[sid]

    async def stop(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await self.idle()

    async def _guarded(self, env: AssembleContext, read: Read | None = None) -> None:
        sid = env.session_id
        current: tuple[AssembleContext, Read | None] | None = (env, read)
        try:
            while current is not None:
                try:
                    await self.run(*current)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the next poke tries again
                    log.exception("session %s: observation failed", sid)
                current = self._latest.pop(sid, None)
        finally:
            # In the same step as the last look at `_latest`: a poke from now on starts a
            # new task. (A done callback would run later, leaving a window in which a poke
            # parks its request in `_latest` for a task that has already finished.)
            if self._running.get(sid) is asyncio.current_task():
                del self._running[sid]

    async def run(self, env: AssembleContext, read: Read | None = None) -> None:
        sid = env.session_id
        end = env.history_len
        counts = self._counts(sid, end)
        if counts is None:
            observed_to = (await self.store.observation_state(sid)).observed_to
            self._seen.put(sid, counts := (observed_to, observed_to, 0))
        if self._too_few(counts, end):
            return
        observed_to, scanned, turns = counts
        if scanned < end:
            turns += model_turns(await self._unread(sid, scanned, end, read=read))
            scanned = end
        self._seen.put(sid, (observed_to, scanned, turns))
        if turns < self.every_turns:
            return
        owner = uuid.uuid4().hex
        taken, state, earlier = await self.store.begin_observation(sid, owner, ttl_s=LOCK_TTL_S, recent=RECENT_NOTES)
        if not taken:
            return  # another replica is on it
        try:
            self._moved(sid, state.observed_to)  # it may have moved while we read
            if end - state.observed_to < self.every_turns:
                return
            state = await self._observe(env, state.observed_to, end, earlier=earlier, read=read)
            self._moved(sid, state.observed_to)
            if self.reflect_every > 0 and state.observations - state.reflected >= self.reflect_every:
                await self._reflect(env, state.reflected, state.observations)
        finally:
            with contextlib.suppress(Exception):
                await self.store.unlock(sid, "observe", owner)

    def _counts(self, sid: str, end: int) -> tuple[int, int, int] | None:
        """The counts kept for `sid` (`_seen`), counted afresh from `observed_to` when `end`
        is older than what was already looked at; None when none are kept."""
        seen = self._seen.get(sid)
        if seen is not None and end < seen[1]:  # an older request than one already looked at
            self._seen.put(sid, seen := (seen[0], seen[0], 0))
        return seen

    def _too_few(self, counts: tuple[int, int, int], end: int) -> bool:
        """Whether the history up to `end` cannot hold N unread model turns by `counts`."""
        observed_to, scanned, turns = counts
        if end - observed_to < self.every_turns:
            return True  # cannot hold N model turns: no read needed
        # even if every unread message were a model turn: too few, read them later
        return turns + (end - scanned) < self.every_turns

    async def _unread(self, sid: str, start: int, end: int, *, read: Read | None) -> list[Message]:
        """History messages [start, end): from what the assembly read when it covers them
        (committed messages never change), else from the store."""
        if read is not None and read[0] <= start and read[0] + len(read[1]) >= end:
            return read[1][start - read[0]:end - read[0]]
        return await self.sessions.history(sid, start, end - 1)

    def _moved(self, sid: str, observed_to: int) -> None:
        """The stored `observed_to` as just read: the count restarts from it if it moved."""
        seen = self._seen.get(sid)
        if seen is None or seen[0] != observed_to:
            self._seen.put(sid, (observed_to, observed_to, 0))

    async def _observe(self, env: AssembleContext, start: int, end: int, *, earlier: list[Note],
                       read: Read | None) -> ObservationState:
        """The observation of history [start, end) written (or the turns marked observed
        when the model finds nothing worth keeping); the observation state after it."""
        sid = env.session_id
        messages = await self._unread(sid, start, end, read=read)
        text, usage = await self.complete(env, message_ids.memory_step_id(sid, "observe", end), OBSERVATION_SYSTEM,
                                          observation_request(messages, earlier), OBSERVATION_MAX_TOKENS)
        text = text.strip()
        if await self._deleted(sid):
            return await self.store.observation_state(sid)
        if not text:  # nothing worth keeping: these turns are done all the same
            await self.store.mark_observed(sid, end)
            return await self.store.observation_state(sid)
        item: Note = {"text": text, "session_id": sid, "run_id": env.run_id, "from_message": start,
                "to_message": end, "turns": model_turns(messages), "actor": env.actor, "at": now_rfc3339()}
        state = await self.store.add_observation(sid, item, env.actor, usage=usage, observed_to=end)
        await self.emit(sid, env.run_id, "memory.observation", key=message_ids.event_key("memory.observation", end),
                        fields=MemoryObservationFields(observation=text, from_message=start, to_message=end, actor=env.actor))
        return state

    async def _deleted(self, sid: str) -> bool:
        """The session was deleted (or is being deleted) while its note was written: the note
        is dropped, not stored for a session that is gone (services/router/shell/erasure.py)."""
        raw, _version = await self.sessions.load(sid)
        return is_deleted(raw) or (raw is None and not await self.sessions.history(sid, 0, 0))

    async def _reflect(self, env: AssembleContext, start: int, end: int) -> None:
        sid = env.session_id
        observations = await self.store.observations(sid, start, end - 1)
        text, usage = await self.complete(env, message_ids.memory_step_id(sid, "reflect", end), REFLECTION_SYSTEM,
                                          reflection_request(observations), REFLECTION_MAX_TOKENS)
        text = text.strip()
        if await self._deleted(sid):
            return
        if not text:
            await self.store.mark_reflected(sid, end)
            return
        item: Note = {"text": text, "session_id": sid, "run_id": env.run_id, "observations": end - start,
                "actor": env.actor, "at": now_rfc3339()}
        await self.store.add_reflection(sid, item, env.actor, usage=usage, reflected=end)
        await self.emit(sid, env.run_id, "memory.reflection", key=message_ids.event_key("memory.reflection", end),
                        fields=MemoryReflectionFields(reflection=text, observations=end - start, actor=env.actor))
