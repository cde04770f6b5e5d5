"""In-flight steps: cancel notices that stop them, and heartbeats that keep them alive.

The llm and tools services both run long steps. The router publishes a cancel notice on
core NATS `<prefix>.ctl.<sid>.cancel` (body optional, `{"run_id": ...}` narrows it to one
run) when a steer or an abort makes a step moot; `InflightSteps` turns that notice into a
`CancelSignal` the step watches (`unless_cancelled`). `Heartbeat` sends JetStream `in_progress()` every
ack_wait/3 so a step that is alive is never redelivered to another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from nats.aio.msg import Msg

from loopwire.shared.contract import codec
from loopwire.shared.contract.subjects import Subjects

__all__ = ["CancelSignal", "Heartbeat", "InflightSteps", "StepCancelled", "log", "unless_cancelled"]

log = logging.getLogger("loopwire.inflight")

T = TypeVar("T")


class StepCancelled(Exception):
    """The step's session asked to stop it (a steer or an abort)."""


class CancelSignal(asyncio.Event):
    """An event that also calls back when set: `unless_cancelled` stops the running task
    with it, instead of racing the work against a waiter in two more tasks."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        if not self.is_set():
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback()
        super().set()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the signal is set; returns the function that removes it."""
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove


async def unless_cancelled(work: Coroutine[Any, Any, T], cancel: CancelSignal | None) -> T:
    """Await `work` in the current task; raise StepCancelled if `cancel` is set first.

    Like `asyncio.timeout`: the signal cancels the current task, and only a cancellation it
    caused becomes StepCancelled (one from outside, a shutdown, stays a CancelledError)."""
    if cancel is None:
        return await work
    if cancel.is_set():
        work.close()
        raise StepCancelled()
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    remove = cancel.on_set(fire)
    try:
        result = await work
    except BaseException as exc:
        # Whatever the work raised while we cancelled it (a stream that fails as it
        # closes, say) is the cancellation's doing, unless the task is cancelled from
        # outside as well.
        if not fired or task.uncancel() > 0 or not isinstance(exc, asyncio.CancelledError | Exception):
            raise
        raise StepCancelled() from None
    finally:
        remove()
    if fired:  # the work swallowed our cancellation and finished anyway
        task.uncancel()
    return result


class InflightSteps:
    def __init__(self, subjects: Subjects) -> None:
        self._subjects = subjects
        self._by_session: dict[str, list[tuple[str, CancelSignal]]] = {}

    @contextlib.contextmanager
    def track(self, session_id: str, run_id: str) -> Iterator[CancelSignal]:
        """A signal set when a cancel notice for this session (and run) arrives."""
        entry = (run_id, CancelSignal())
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
