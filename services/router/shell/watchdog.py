"""The router's watchdog: a run with a step in flight and no progress for too long ends
`failed` with an `error` `undeliverable` (cause `stalled`), so no session stays `running`
for ever.

Dead letters (shared/runtime/dead_letters.py) cover work JetStream gives up. This covers work that
is never given up because it is never delivered at all: no process of the service that
takes it runs any more, its message was lost with a NATS store, a handler hangs. The
router keeps the sessions with a run in progress in the Redis sorted set keys.RUNNING
(score: when the run started), written when a session's status changes. Every replica
sweeps it every `interval_s`: a session whose state version has not moved for longer than
`stall_after_s` and that still waits for a step gets an `UndeliverableInput` naming that
step, so a step answered meanwhile, or a run that ended, is left alone; replicas that
fire together send the same input id, which the core applies once.

"Too long" is LOOPWIRE_OUTAGE_TOLERANCE_S, or the longest a step of the run may
legitimately take (LOOPWIRE_LLM_TIMEOUT_S or LOOPWIRE_TOOL_TIMEOUT_S, plus one ack wait)
when that is longer. A run of an external-executor profile waits for an agent's whole turn
(LOOPWIRE_EXECUTOR_TIMEOUT_S, an hour by default), so its limit is its own: an agent's
long turn is not a stall, and a model or tool step of any other run is not held to an
agent's hour.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from loopwire.shared.contract import keys
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.periodic import PeriodicSweep

from ..core.executor_profiles import is_executor
from ..core.inputs import BaseInput, UndeliverableInput

log = logging.getLogger("loopwire.router.watchdog")

SWEEP_LIMIT = 10_000
"""Sessions looked at per sweep (the oldest runs first)."""


async def note_status(redis: aioredis.Redis, sid: str, running: bool) -> None:
    """Keep keys.RUNNING in step with a session's status (called after its commit)."""
    if running:
        await redis.zadd(keys.RUNNING, {sid: time.time()}, nx=True)
    else:
        await redis.zrem(keys.RUNNING, sid)


class Watchdog(PeriodicSweep):
    name = "router-watchdog"
    log = log

    def __init__(self, redis: aioredis.Redis, apply: Callable[[str, BaseInput], Awaitable[Any]],
                 load: Callable[[str], Awaitable[tuple[dict[str, Any] | None, int]]], *,
                 stall_after_s: float, interval_s: float | None = None,
                 executor_stall_after_s: float | None = None) -> None:
        self._redis = redis
        self._apply = apply
        self._load = load
        self.stall_after_s = stall_after_s
        self.executor_stall_after_s = max(stall_after_s, executor_stall_after_s or stall_after_s)
        """The limit for runs of the external-executor profiles (an agent's turn is one step)."""
        self.interval_s = interval_s if interval_s is not None else max(1.0, min(30.0, stall_after_s / 5))
        self._seen: dict[str, tuple[int, float]] = {}
        """sid -> (state version, when this replica first saw that version)."""

    async def sweep(self, now: float | None = None) -> list[str]:
        """One pass; returns the sessions whose runs it ended."""
        now = time.monotonic() if now is None else now
        raw = await self._redis.zrange(keys.RUNNING, 0, SWEEP_LIMIT - 1)
        sids = [s.decode() if isinstance(s, bytes) else str(s) for s in raw]
        if not sids:
            self._seen.clear()
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for sid in sids:
                pipe.hget(keys.session_state(sid), "ver")
            versions = await pipe.execute()
        seen: dict[str, tuple[int, float]] = {}
        stalled: list[str] = []
        for sid, ver in zip(sids, versions, strict=True):
            version = int(ver) if ver is not None else 0
            before = self._seen.get(sid)
            since = before[1] if before is not None and before[0] == version else now
            seen[sid] = (version, since)
            if now - since >= self.stall_after_s:
                stalled.append(sid)
        self._seen = seen
        ended = []
        for sid in stalled:
            if await self._end_if_stalled(sid, now - seen[sid][1]):
                ended.append(sid)
        return ended

    async def _end_if_stalled(self, sid: str, idle_s: float) -> bool:
        raw, version = await self._load(sid)
        state = SessionState.load(raw, sid) if raw is not None else None
        run = state.run if state is not None else None
        if state is None or state.status != "running" or run is None:
            await note_status(self._redis, sid, False)  # not running (any more): out of the index
            self._seen.pop(sid, None)
            return False
        if run.pending_step is None:
            return False  # nothing in flight (the router itself is between steps)
        if is_executor(run.config.profile) and idle_s < self.executor_stall_after_s:
            return False  # an agent's turn may take this long
        log.error("session %s: run %s has waited %.0f s for step %s with no progress; ending it",
                  sid, run.run_id, idle_s, run.pending_step)
        await self._apply(sid, UndeliverableInput(
            input_id=f"stalled:{run.run_id}:{version}", run_id=run.run_id, step_id=run.pending_step,
            what=f"step {run.pending_step}",
            reason=f"no progress for {idle_s:.0f} s (longer than the outage tolerance and the longest step)"))
        metrics.DEAD_LETTERS.labels(target="step", cause="stalled").inc()
        return True
