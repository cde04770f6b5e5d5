"""A small client of the public contract, on plain nats-py (what the CLI and
loopwire.testing use; a user may use it or write the same in a few lines).

    async with await LoopwireClient.connect("nats://127.0.0.1:4222") as lw:
        ended = await lw.run("s1", {"input": "What is 2+2?"}, on_event=print)
        print(ended["status"], ended["final_text"])
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from loopwire.settings import Settings
from loopwire.shared.contract.events import AnyEvent, RunEndedEvent
from loopwire.shared.contract.query_replies import LimitsUsage, SessionDeleted, SessionGot, UserErased
from loopwire.shared.contract.subjects import EVENTS_STREAM, Subjects, stream_name
from loopwire.shared.runtime.credentials import nats_connect_options, split_servers

EventCallback = Callable[[AnyEvent], Awaitable[None] | None]


class RunFailedToStart(RuntimeError):
    """The router answered the start with an `error` event (bad input, busy session)."""

    def __init__(self, event: AnyEvent) -> None:
        super().__init__(f"{event.get('code')}: {event.get('message')}")
        self.event = event


async def events_of_the_run(events: AsyncIterable[AnyEvent],
                            on_event: EventCallback | None = None) -> AsyncIterator[AnyEvent]:
    """The events of the run that the next `run.started` begins, each given to `on_event`
    first; the other runs' are skipped. RunFailedToStart when an `error` of no run comes
    before it (the start was refused)."""
    run_id: str | None = None
    async for event in events:
        if run_id is None:
            if event["kind"] == "run.started":
                run_id = event["run_id"]
            elif event["kind"] == "error" and event.get("run_id") is None:
                raise RunFailedToStart(event)
            else:
                continue
        if event.get("run_id") != run_id:
            continue
        if on_event is not None:
            maybe = on_event(event)
            if asyncio.iscoroutine(maybe):
                await maybe
        yield event


class LoopwireClient:
    def __init__(self, nc: NatsClient, prefix: str = "loopwire", own_connection: bool = False,
                 tenant: str | None = None) -> None:
        """`tenant`: with tenants on (docs/security.md), the tenant this client acts for:
        its session ids are `<tenant>.<sid>` and its queries go to that tenant's subjects."""
        self.nc = nc
        self.subjects = Subjects(prefix, tenants=tenant is not None)
        self.tenant = tenant
        self._own = own_connection

    @classmethod
    async def connect(cls, url: str, prefix: str = "loopwire", **options: Any) -> LoopwireClient:
        """`url`: one NATS server, or the servers of one cluster comma-separated (as
        LOOPWIRE_NATS_URL). `options`: more keyword arguments of ``nats.connect`` (user,
        password, token, user_credentials, nkeys_seed, tls, ...)."""
        nc = await nats.connect(servers=split_servers(url), **options)
        return cls(nc, prefix, own_connection=True)

    @classmethod
    async def from_settings(cls, settings: Settings, **options: Any) -> LoopwireClient:
        """Connect as the operator configured it: `LOOPWIRE_NATS_URL`, its credentials and
        TLS (shared/runtime/credentials.py, the same options the services use) and the prefix."""
        if settings.tenant:
            # deploy/nats/tenants.conf gives each tenant's user only its own reply inbox
            options = {"inbox_prefix": f"_INBOX_{settings.tenant}", **options}
        nc = await nats.connect(**{**nats_connect_options(settings), **options})
        return cls(nc, settings.subject_prefix, own_connection=True, tenant=settings.tenant)

    async def __aenter__(self) -> LoopwireClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own:
            await self.nc.drain()

    async def publish(self, sid: str, verb: str, body: dict[str, Any] | bytes,
                      msg_id: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """Publish to `<prefix>.in.<sid>.<verb>` and wait for JetStream's acknowledgement
        (`{"stream": ..., "seq": ..., "duplicate"?: true}`): durably accepted."""
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        reply = await self.nc.request(self.subjects.ingress(self.scoped(sid), verb), data, timeout=timeout,
                                      headers=headers)
        return orjson.loads(reply.data)

    async def session_get(self, sid: str, timeout: float = 5.0) -> SessionGot:
        reply = await self.nc.request(self.subjects.query("session.get", self.tenant),
                                      orjson.dumps({"session_id": self.scoped(sid)}), timeout=timeout)
        return orjson.loads(reply.data)

    async def transcript_get(self, sid: str, after_seq: int = 0, limit: int = 1000,
                             timeout: float = 5.0) -> dict[str, Any]:
        body = {"session_id": self.scoped(sid), "after_seq": after_seq, "limit": limit}
        reply = await self.nc.request(self.subjects.query("transcript.get", self.tenant), orjson.dumps(body),
                                      timeout=timeout)
        return orjson.loads(reply.data)

    async def sessions_list(self, status: str | None = None, limit: int = 100, cursor: str | None = None,
                            timeout: float = 5.0) -> dict[str, Any]:
        """One page of sessions, most recently updated first (`cursor` of the reply: the next)."""
        body = {"status": status, "limit": limit, "cursor": cursor}
        reply = await self.nc.request(self.subjects.query("sessions.list", self.tenant), orjson.dumps(body),
                                      timeout=timeout)
        return orjson.loads(reply.data)

    async def limits_usage(self, model: str | None = None, timeout: float = 5.0) -> LimitsUsage:
        """`<prefix>.api.limits.usage`: each LOOPWIRE_MODEL_LIMITS entry (or the one `model`
        counts against) with what it holds now across the llm replicas."""
        body = {"model": model} if model is not None else {}
        reply = await self.nc.request(self.subjects.query("limits.usage"), orjson.dumps(body), timeout=timeout)
        return orjson.loads(reply.data)

    async def fork(self, sid: str, new_session_id: str, at_seq: int | None = None, tools: str = "live",
                   timeout: float = 10.0) -> dict[str, Any]:
        """`<prefix>.api.session.fork`: a new idle session `new_session_id` whose history is
        `sid`'s as it stood at `at_seq` (omitted: its last event). `tools="recorded"`: the
        fork's tool calls are answered from `sid`'s recorded results (a replay). The reply,
        or `{"error": {"code", "message"}}`."""
        body: dict[str, Any] = {"session_id": self.scoped(sid), "new_session_id": self.scoped(new_session_id),
                                "tools": tools}
        if at_seq is not None:
            body["at_seq"] = at_seq
        reply = await self.nc.request(self.subjects.query("session.fork", self.tenant), orjson.dumps(body),
                                      timeout=timeout)
        return orjson.loads(reply.data)

    async def session_delete(self, sid: str, timeout: float = 30.0) -> SessionDeleted:
        """`<prefix>.api.session.delete`: the session removed from every store (a run in
        progress aborted first). The receipt `{"session_id", "deleted", "stores": [{"store",
        "removed"}]}`, or `{"error": ...}`."""
        reply = await self.nc.request(self.subjects.query("session.delete", self.tenant),
                                      orjson.dumps({"session_id": self.scoped(sid)}), timeout=timeout)
        return orjson.loads(reply.data)

    async def user_erase(self, user_id: str, timeout: float = 120.0) -> UserErased:
        """`<prefix>.api.user.erase`: every session whose runs carried `user_id`, deleted;
        `{"user_id", "sessions": [<session.delete receipts>]}`."""
        reply = await self.nc.request(self.subjects.query("user.erase", self.tenant),
                                      orjson.dumps({"user_id": user_id}), timeout=timeout)
        return orjson.loads(reply.data)

    async def session_export(self, sid: str, timeout: float = 30.0) -> dict[str, Any]:
        """`<prefix>.api.session.export`: `{"session_id", "state", "events"}`, large content
        resolved."""
        reply = await self.nc.request(self.subjects.query("session.export", self.tenant),
                                      orjson.dumps({"session_id": self.scoped(sid)}), timeout=timeout)
        return orjson.loads(reply.data)

    async def transcript(self, sid: str, after_seq: int = 0) -> list[AnyEvent]:
        """Every stored event of the session after `after_seq`, page by page (`transcript.get`)."""
        events: list[AnyEvent] = []
        while True:
            page = await self.transcript_get(sid, after_seq=after_seq, limit=1000)
            if "error" in page:
                raise RuntimeError(f"{page['error'].get('code')}: {page['error'].get('message')}")
            events.extend(page.get("events") or [])
            if "next_after_seq" not in page:
                return events
            after_seq = page["next_after_seq"]

    def scoped(self, sid: str) -> str:
        """`sid` as the session id it is: `<tenant>.<sid>` for a client of a tenant."""
        return f"{self.tenant}.{sid}" if self.tenant and "." not in sid else sid

    async def follow(self, sid: str, after_seq: int = 0, new_only: bool = False) -> SessionFollower:
        """Follow a session's events through the LOOPWIRE_EVENTS stream with an ordered
        consumer: each event once, in `seq` order, across NATS restarts and reconnects and
        across a loopwire process killed mid-run (whose recovery may publish an event
        again: it is skipped by its `seq`). `after_seq`: only events after it (a client
        that saw up to there); `new_only`: only events published from now on.

        Use as `async with await lw.follow(sid) as events: async for event in events: ...`."""
        follower = SessionFollower(after_seq, first_any=new_only)
        if self.tenant is not None:
            # A tenant's user has no JetStream API (deploy/nats/tenants.conf): nats-py's
            # ordered consumer is created on a subject that does not name its filter, so
            # permissions could not keep it to the tenant's sessions. It follows live on
            # the tenant's own subjects, each seq once; `transcript.get` fills a gap.
            follower.sub = await self.nc.subscribe(self.subjects.session_events(self.scoped(sid)),
                                                   cb=follower.on_msg)
            return follower
        js = self.nc.jetstream()
        self._ensure_stream_name()
        try:
            follower.sub = await js.subscribe(
                self.subjects.session_events(self.scoped(sid)), stream=self._events_stream, ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW if new_only else DeliverPolicy.ALL, cb=follower.on_msg)
        except NotFoundError:
            # No events stream: no loopwire service ever ran against this NATS.
            raise nats.errors.NoRespondersError() from None
        return follower

    def _ensure_stream_name(self) -> None:
        if not hasattr(self, "_events_stream"):
            self._events_stream = stream_name(self.subjects.prefix, EVENTS_STREAM)

    async def run(self, sid: str, start: dict[str, Any], on_event: EventCallback | None = None,
                  timeout: float = 300.0) -> RunEndedEvent:
        """Start a run and follow its events (`follow`: each once) until its `run.ended`,
        which is returned."""
        async with await self.follow(sid, new_only=True) as events:
            await self.publish(sid, "start", {"v": 1, **start}, msg_id=uuid.uuid4().hex)
            async with asyncio.timeout(timeout):
                async for event in events_of_the_run(events, on_event):
                    if event["kind"] == "run.ended":
                        return event
        raise RuntimeError("the event subscription ended before run.ended")


REORDER_HOLD_S = 0.5
"""How long an event after a gap in `seq` is held back for the missing one. Two router
replicas publish a session's events each on its own connection, so the events of inputs
applied back to back can arrive crossed (docs/deployment.md); a gap that does not fill
in time is a seq that was taken and never published, and the held events go on."""


class SessionFollower:
    """The events of one session, each once, in `seq` order (LoopwireClient.follow).

    `first_any`: the first event may have any seq above `after_seq` (following only new
    events, whose first seq is not known); otherwise the next expected is `after_seq + 1`."""

    def __init__(self, after_seq: int = 0, first_any: bool = False) -> None:
        self.last_seq = after_seq
        """The highest `seq` handed out so far: an event at or below it is a re-publish."""
        self.skipped = 0
        """Events dropped as already seen (a recovery's re-publish beyond the dedup window)."""
        self.sub: Any = None
        self._queue: asyncio.Queue[AnyEvent] = asyncio.Queue()
        self._held: dict[int, AnyEvent] = {}
        self._held_since = 0.0
        self._first_any = first_any

    async def on_msg(self, msg: Any) -> None:
        self._queue.put_nowait(orjson.loads(msg.data))

    async def __aenter__(self) -> SessionFollower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None

    def __aiter__(self) -> SessionFollower:
        return self

    async def __anext__(self) -> AnyEvent:
        loop = asyncio.get_running_loop()
        while True:
            if self._held and min(self._held) == self.last_seq + 1:
                return self._hand_out(min(self._held))
            try:
                if not self._held:
                    event = await self._queue.get()
                elif not self._queue.empty():  # what already arrived may fill the gap
                    event = self._queue.get_nowait()
                else:
                    left = self._held_since + REORDER_HOLD_S - loop.time()
                    event = await asyncio.wait_for(self._queue.get(), max(0.0, left))
            except TimeoutError:  # the gap did not fill: go on from the lowest held
                return self._hand_out(min(self._held))
            seq = event.get("seq")
            if not isinstance(seq, int):
                return event
            if seq <= self.last_seq or seq in self._held:
                self.skipped += 1
                continue
            if self._first_any or seq == self.last_seq + 1:
                self._first_any = False
                self.last_seq = seq
                return event
            if not self._held:
                self._held_since = loop.time()
            self._held[seq] = event

    def _hand_out(self, seq: int) -> AnyEvent:
        event = self._held.pop(seq)
        self.last_seq = seq
        self._held_since = asyncio.get_running_loop().time()  # a further gap waits its own hold
        return event
