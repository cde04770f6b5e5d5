"""In-flight steps: cancel notices that stop them, and heartbeats that keep them alive.

The llm and tools services both run long steps. The router publishes a cancel notice on
core NATS `<prefix>.ctl.<sid>.cancel` (body optional, `{"run_id": ...}` narrows it to one
run) when a steer or an abort makes a step moot; `InflightSteps` turns that notice into an
`asyncio.Event` the step watches. `Heartbeat` sends JetStream `in_progress()` every
ack_wait/3 so a step that is alive is never redelivered to another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from nats.aio.msg import Msg

from . import codec
from .subjects import Subjects

log = logging.getLogger("loopwire.inflight")


class InflightSteps:
    def __init__(self, subjects: Subjects) -> None:
        self._subjects = subjects
        self._by_session: dict[str, list[tuple[str, asyncio.Event]]] = {}

    @contextlib.contextmanager
    def track(self, session_id: str, run_id: str) -> Iterator[asyncio.Event]:
        """An event set when a cancel notice for this session (and run) arrives."""
        entry = (run_id, asyncio.Event())
        self._by_session.setdefault(session_id, []).append(entry)
        try:
            yield entry[1]
        finally:
            entries = self._by_session.get(session_id, [])
            if entry in entries:
                entries.remove(entry)
            if not entries:
                self._by_session.pop(session_id, None)

    def __len__(self) -> int:
        """Sessions with steps in flight."""
        return len(self._by_session)

    def cancel(self, session_id: str, run_id: str | None = None) -> int:
        """Set the events of the session's steps (of `run_id` only, when given)."""
        hits = 0
        for entry_run, event in self._by_session.get(session_id, []):
            if run_id is None or entry_run == run_id:
                event.set()
                hits += 1
        return hits

    async def on_notice(self, msg: Msg) -> None:
        """Callback for a core subscription on `subjects.cancel_all`."""
        head, tail = f"{self._subjects.prefix}.ctl.", ".cancel"
        if not (msg.subject.startswith(head) and msg.subject.endswith(tail)):
            return
        run_id = None
        if msg.data:
            with contextlib.suppress(Exception):
                body = codec.loads(msg.data)
                run_id = body.get("run_id") if isinstance(body, dict) else None
        self.cancel(msg.subject[len(head):-len(tail)], run_id)


class Heartbeat:
    """Calls `beat` (a message's `in_progress`) every ack_wait/3 while a step runs.

    Driven by a timer, not a task per step: most steps end long before the first beat is
    due, so they cost one timer handle, scheduled and cancelled. `with Heartbeat(...)`."""

    def __init__(self, beat: Callable[[], Awaitable[None]] | None, ack_wait_s: float) -> None:
        self._beat = beat
        self._interval = max(0.05, ack_wait_s / 3)
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._closed = False

    def __enter__(self) -> Heartbeat:
        if self._beat is not None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._due)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._sending is not None and not self._sending.done():
            self._sending.cancel()

    def _due(self) -> None:
        if not self._closed:
            self._sending = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        assert self._beat is not None
        try:
            await self._beat()
        except Exception as exc:  # a missed heartbeat only risks a redelivery
            log.debug("in_progress failed: %s", exc)
        if not self._closed:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._due)
