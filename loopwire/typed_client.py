"""`loopwire.Client`: the public contract as typed async Python.

    import loopwire

    async with await loopwire.Client.connect("nats://127.0.0.1:4222") as lw:
        ended = await lw.run("What is 17 * 23 + 4?", tools=["calculator"])
        print(ended.status, ended.final_text, ended.cost_usd)

        sid = await lw.start("Clean up /tmp", tool_permissions={"rm": "approve"})
        async for event in lw.events(sid):
            if isinstance(event, ApprovalRequested):
                await lw.decide(sid, event.checkpoint_id, "approve")
            elif isinstance(event, RunEnded):
                break

Events are the models of `loopwire.shared.events` (RunStarted, TextDelta, ToolCallEvent,
ApprovalRequested, RunEnded, ...; an unknown kind comes as the base `Event`). Input goes
through the durable ingress (JetStream acknowledges each publish); the queries are core
request/reply. It is built on `LoopwireClient` (loopwire/client.py), whose dict-level
methods stay available as `client.raw`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import orjson

from loopwire.client import LoopwireClient, RunFailedToStart
from loopwire.shared.events import ApprovalRequested, Event, RunEnded, validate_event
from loopwire.shared.settings import Settings

TypedCallback = Callable[[Event], Awaitable[None] | None]
Approver = Callable[[ApprovalRequested], Awaitable[bool] | bool]
"""Answers a checkpoint during `run`: True approves, False denies."""


class QueryError(RuntimeError):
    """A query answered `{"error": {"code", "message"}}`."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")


class Client:
    def __init__(self, raw: LoopwireClient) -> None:
        self.raw = raw

    @classmethod
    async def connect(cls, url: str = "nats://127.0.0.1:4222", prefix: str = "loopwire",
                      **options: Any) -> Client:
        """`options`: more keyword arguments of ``nats.connect`` (credentials, TLS)."""
        return cls(await LoopwireClient.connect(url, prefix, **options))

    @classmethod
    async def from_settings(cls, settings: Settings | None = None, **options: Any) -> Client:
        """Connect as the operator configured it (LOOPWIRE_NATS_URL, credentials, TLS, prefix)."""
        return cls(await LoopwireClient.from_settings(settings or Settings(), **options))

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.raw.close()

    # -- input (durable ingress) ---------------------------------------------------------------
    async def _publish(self, sid: str, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.raw.publish(sid, verb, {"v": 1, **body}, msg_id=uuid.uuid4().hex)

    async def start(self, input: str | list[dict[str, Any]], session_id: str | None = None,
                    **fields: Any) -> str:
        """Publish a StartRun (`fields`: profile, model, tools, tool_permissions, limits,
        system, ...) and return the session id once JetStream accepted it. The run's
        events follow on `events(session_id)`."""
        sid = session_id or f"py-{uuid.uuid4().hex[:12]}"
        await self._publish(sid, "start", {"input": input, **fields})
        return sid

    async def send(self, session_id: str, content: str | list[dict[str, Any]]) -> None:
        """A follow-up message: taken at the run's next boundary, or a new run on an idle session."""
        await self._publish(session_id, "message", {"content": content})

    async def steer(self, session_id: str, content: str | list[dict[str, Any]]) -> None:
        """Applied at the next boundary, even mid-generation or mid-tool."""
        await self._publish(session_id, "steer", {"content": content})

    async def abort(self, session_id: str, reason: str = "aborted") -> None:
        await self._publish(session_id, "abort", {"reason": reason})

    async def decide(self, session_id: str, checkpoint_id: str, decision: Literal["approve", "deny"],
                     note: str | None = None) -> None:
        """Answer an `approval.requested` checkpoint."""
        body: dict[str, Any] = {"checkpoint_id": checkpoint_id, "decision": decision}
        if note:
            body["note"] = note
        await self._publish(session_id, "decision", body)

    # -- events ------------------------------------------------------------------------------
    async def _subscribe(self, session_id: str) -> _LiveEvents:
        live = _LiveEvents()
        live.sub = await self.raw.nc.subscribe(self.raw.subjects.session_events(session_id), cb=live.collect)
        return live

    async def events(self, session_id: str, after_seq: int | None = 0) -> AsyncIterator[Event]:
        """The session's events as typed models, in `seq` order, each once: the stored
        ones after `after_seq` first (`transcript.get`), then live ones as they come.
        `after_seq=None`: live events only. Runs until the caller stops iterating."""
        live = await self._subscribe(session_id)
        try:
            last = after_seq
            if after_seq is not None:
                # Subscribed first, then read what is stored: nothing falls in between,
                # and what both give is skipped by its seq.
                for stored in await self.transcript(session_id, after_seq=after_seq):
                    last = max(last or 0, stored.seq)
                    yield stored
            while True:
                event = await live.next()
                if last is not None and event.seq <= last:
                    continue
                last = event.seq
                yield event
        finally:
            await live.close()

    async def run(self, input: str | list[dict[str, Any]], session_id: str | None = None, *,
                  on_event: TypedCallback | None = None, approve: Approver | None = None,
                  timeout: float = 300.0, **fields: Any) -> RunEnded:
        """Start a run, follow it to its end and return its `run.ended`. `approve` answers
        its checkpoints as they come (else they wait for `decide` from elsewhere);
        `on_event` sees every event of the run. Raises RunFailedToStart when the start
        is refused (an `error` without a run)."""
        sid = session_id or f"py-{uuid.uuid4().hex[:12]}"
        live = await self._subscribe(sid)  # before the start: its first event is not missed
        try:
            async with asyncio.timeout(timeout):
                await self.start(input, sid, **fields)
                run_id: str | None = None
                while True:
                    event = await live.next()
                    if run_id is None:
                        if event.kind == "run.started":
                            run_id = event.run_id
                        elif event.kind == "error" and event.run_id is None:
                            raise RunFailedToStart(event.model_dump(by_alias=True))
                        else:
                            continue
                    if event.run_id != run_id:
                        continue
                    if on_event is not None:
                        maybe = on_event(event)
                        if asyncio.iscoroutine(maybe):
                            await maybe
                    if isinstance(event, ApprovalRequested) and approve is not None:
                        verdict = approve(event)
                        ok = await verdict if asyncio.iscoroutine(verdict) else verdict
                        await self.decide(sid, event.checkpoint_id, "approve" if ok else "deny")
                    if isinstance(event, RunEnded):
                        return event
        finally:
            await live.close()

    # -- queries -----------------------------------------------------------------------------
    async def _query(self, subject: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        reply = await self.raw.nc.request(subject, orjson.dumps(body), timeout=timeout)
        data: dict[str, Any] = orjson.loads(reply.data)
        if "error" in data:
            raise QueryError(data["error"])
        return data

    async def session(self, session_id: str) -> dict[str, Any]:
        """`session.get`: status (`unknown` for a session never seen), profile, turns,
        usage, cost_usd, messages, and the open checkpoint_id while awaiting approval."""
        return await self._query(self.raw.subjects.session_get, {"session_id": session_id})

    async def transcript(self, session_id: str, after_seq: int = 0) -> list[Event]:
        """Every stored event after `after_seq`, typed, in seq order (all pages)."""
        events: list[Event] = []
        after = after_seq
        while True:
            page = await self._query(self.raw.subjects.transcript_get,
                                     {"session_id": session_id, "after_seq": after, "limit": 1000})
            events.extend(validate_event(e) for e in page.get("events", []))
            if "next_after_seq" not in page:
                return events
            after = page["next_after_seq"]

    async def tools(self) -> list[dict[str, Any]]:
        """What the tools service knows now: name, description, input_schema, source."""
        return list((await self._query(self.raw.subjects.tools_list, {}))["tools"])

    async def sessions(self, status: str | None = None, limit: int = 100,
                       cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of sessions, most recently updated first, and the cursor of the next."""
        body: dict[str, Any] = {"limit": limit}
        if status:
            body["status"] = status
        if cursor:
            body["cursor"] = cursor
        page = await self._query(self.raw.subjects.sessions_list, body)
        return list(page.get("sessions", [])), page.get("cursor")


class _LiveEvents:
    """A core subscription to one session's events, queued until read."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.sub: Any = None

    async def collect(self, msg: Any) -> None:
        self.queue.put_nowait(msg.data)

    async def next(self) -> Event:
        return validate_event(orjson.loads(await self.queue.get()))

    async def close(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None
