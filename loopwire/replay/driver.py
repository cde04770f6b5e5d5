"""A recorded session replayed: its inputs sent again, on a fork made before its first
input, against another model or system prompt, and the two sessions compared.

    async with await LoopwireClient.connect(url) as lw:
        report = await replay_session(lw, "ticket-17", model="claude-haiku-4-5")
        print(report)                       # side by side, per run
        assert not report.differs           # no run's status changed

1. The session's transcript says what its runs were made of (recording.py).
2. `session.fork` at its first `run.started` (the cut falls before the run: the fork holds
   the history the session had before its first input, nothing for a session that
   started with it), with `tools: recorded` by default: the fork's tool calls are
   answered from the session's recorded results, and no tool provider is called.
3. Each run: a `start` with the run's settings (the model and system prompt replaced when
   asked), then, following the fork's events, each input at its point (follow-ups,
   steers, an abort) and the recorded decision for each checkpoint (a checkpoint with no
   recorded decision is denied: nothing runs that no one approved); then the next run,
   once this one ended.
4. The fork's transcript, read like the source's, compared run by run (comparison.py).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from loopwire.client import (
    EventCallback,
    LoopwireClient,
    RunFailedToStart,
    SessionFollower,
    events_of_the_run,
)

from .comparison import ReplayReport, compare
from .recording import RunRecord, recorded_runs

NO_DECISION_NOTE = "denied by the replay: the recorded session has no decision for this checkpoint"


class ReplayError(RuntimeError):
    """The replay could not be made (nothing to replay, the fork refused, a run that never started)."""


def replay_id(sid: str) -> str:
    """A new session id for a replay of `sid` (within the 128 characters an id may have)."""
    own = sid.rpartition(".")[2]
    return f"{own[:100]}-replay-{uuid.uuid4().hex[:8]}"


async def replay_session(lw: LoopwireClient, sid: str, *, model: str | None = None, system: str | None = None,
                         tools: str = "recorded", new_session_id: str | None = None,
                         run_timeout: float = 300.0, on_event: EventCallback | None = None) -> ReplayReport:
    """Replay session `sid` on a fork and compare the two (module docstring)."""
    source_events = await lw.transcript(sid)
    runs = recorded_runs(source_events)
    if not source_events and (await lw.session_get(sid)).get("status") == "unknown":
        raise ReplayError(f"unknown_session: session {sid!r} does not exist (never did, or was deleted)")
    if not runs:
        raise ReplayError(f"session {sid!r} has no run to replay")
    new = new_session_id or replay_id(sid)
    reply = await lw.fork(sid, new, at_seq=runs[0].started_seq, tools=tools)
    if "error" in reply:
        raise ReplayError(f"the fork was refused: {reply['error'].get('code')}: {reply['error'].get('message')}")
    fork_sid = reply["session_id"]
    not_sent: list[dict[str, Any]] = []
    # After the fork's first event (session.forked): a tenant's follower sees only live events.
    async with await lw.follow(fork_sid, after_seq=1) as events:
        for n, run in enumerate(runs, 1):
            start = run.start_body(model=model, system=system)
            await lw.publish(fork_sid, "start", {"v": 1, **start}, msg_id=uuid.uuid4().hex)
            async with asyncio.timeout(run_timeout):
                skipped = await _drive_run(lw, fork_sid, events, run=run, on_event=on_event)
            not_sent.extend({"run": n, "verb": i.verb, "after_turns": i.after_turns} for i in skipped)
    replayed = recorded_runs([e for e in await lw.transcript(fork_sid) if e.get("session_id") == fork_sid])
    return compare(runs, replayed, source_session=lw.scoped(sid), replay_session=fork_sid, tools=tools,
                   model=model, system_changed=system is not None, not_sent=not_sent)


async def _drive_run(lw: LoopwireClient, sid: str, events: SessionFollower, *, run: RunRecord,
                     on_event: EventCallback | None) -> list[Any]:
    """Follow one run of the replay to its end, sending the recorded inputs at their points.
    Returns the inputs it never reached."""
    pending = list(run.inputs)
    decisions = list(run.decisions)
    done = 0
    try:
        async for event in events_of_the_run(events, on_event):
            kind = event["kind"]
            if kind == "run.ended":
                return pending
            if event["kind"] == "message":
                done = max(done, int(event.get("turn") or 0))
            elif event["kind"] == "approval.requested":
                answer = decisions.pop(0) if decisions else {"decision": "deny", "note": NO_DECISION_NOTE}
                await lw.publish(sid, "decision", {"v": 1, "checkpoint_id": event["checkpoint_id"], **answer},
                                 msg_id=uuid.uuid4().hex)
            while pending and pending[0].after_turns <= done and kind in ("run.started", "message"):
                item = pending.pop(0)
                await lw.publish(sid, item.verb, {"v": 1, **item.body}, msg_id=uuid.uuid4().hex)
    except RunFailedToStart as exc:
        raise ReplayError(f"the replay's run did not start: {exc}") from None
    raise ReplayError("the event subscription ended before the replay's run ended")
