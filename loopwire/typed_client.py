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

Events are the models of `loopwire.shared.contract.events` (RunStarted, TextDelta, ToolCallEvent,
ApprovalRequested, RunEnded, ...; an unknown kind comes as the base `Event`), which pydantic
builds from the event TypedDicts: their fields are attributes at run time, not to a type
checker (the dict-level client's events are the TypedDicts themselves). Input goes
through the durable ingress (JetStream acknowledges each publish); the queries are core
request/reply. It is built on `LoopwireClient` (loopwire/client.py), whose dict-level
methods stay available as `client.raw`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar, cast

import orjson

from loopwire.client import LoopwireClient
from loopwire.settings import Settings
from loopwire.shared.contract.events import AnyEvent, ApprovalRequested, Event, RunEnded, validate_event
from loopwire.shared.contract.query_replies import (
    ErrorBody,
    LimitUsage,
    SessionDeleted,
    SessionGot,
    ToolListed,
    ToolsListed,
    UserErased,
)

TypedCallback = Callable[[Event], Awaitable[None] | None]
Approver = Callable[[ApprovalRequested], Awaitable[bool] | bool]
"""Answers a checkpoint during `run`: True approves, False denies."""


R = TypeVar("R", bound=Mapping[str, object])
"""A query's reply, of whichever query."""


class QueryError(RuntimeError):
    """A query answered `{"error": {"code", "message"}}`."""

    def __init__(self, error: ErrorBody) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")


class Client:
    def __init__(self, raw: LoopwireClient) -> None:
        self.raw = raw

    @classmethod
    async def connect(cls, url: str = "nats://127.0.0.1:4222", prefix: str = "loopwire",
                      **options: Any) -> Client:
        """`url`: one NATS server or a cluster's, comma-separated; `options`: more keyword
        arguments of ``nats.connect`` (credentials, TLS)."""
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
    async def events(self, session_id: str, after_seq: int | None = 0) -> AsyncIterator[Event]:
        """The session's events as typed models, each once, in `seq` order, through the
        LOOPWIRE_EVENTS stream (LoopwireClient.follow: an ordered consumer): those after
        `after_seq` (0: from the start), or with `after_seq=None` only new ones. Runs
        until the caller stops iterating."""
        follower = await self.raw.follow(session_id, after_seq=after_seq or 0, new_only=after_seq is None)
        async with follower:
            async for body in follower:
                yield validate_event(body)

    async def run(self, input: str | list[dict[str, Any]], session_id: str | None = None, *,
                  on_event: TypedCallback | None = None, approve: Approver | None = None,
                  timeout: float = 300.0, **fields: Any) -> RunEnded:
        """Start a run, follow it to its end and return its `run.ended`. `approve` answers
        its checkpoints as they come (else they wait for `decide` from elsewhere);
        `on_event` sees every event of the run. Raises RunFailedToStart when the start
        is refused (an `error` without a run)."""
        sid = session_id or f"py-{uuid.uuid4().hex[:12]}"

        async def typed(body: AnyEvent) -> None:
            event = validate_event(body)
            if on_event is not None:
                maybe = on_event(event)
                if asyncio.iscoroutine(maybe):
                    await maybe
            if isinstance(event, ApprovalRequested) and approve is not None:
                verdict = approve(event)
                ok = await verdict if asyncio.iscoroutine(verdict) else verdict
                if body["kind"] == "approval.requested":
                    await self.decide(sid, body["checkpoint_id"], "approve" if ok else "deny")

        ended = await self.raw.run(sid, {"input": input, **fields}, on_event=typed, timeout=timeout)
        return RunEnded.model_validate(ended)

    # -- queries -----------------------------------------------------------------------------
    @staticmethod
    def _checked(reply: R) -> R:
        """`reply`, unless it is a query's error (`{"error": {"code", "message"}}`)."""
        if "error" in reply:
            raise QueryError(cast(ErrorBody, reply["error"]))
        return reply

    async def session(self, session_id: str) -> SessionGot:
        """`session.get`: status (`unknown` for a session never seen), profile, turns,
        usage, cost_usd, messages, the open checkpoint_id while awaiting approval, and where
        a run stands: `phase` and `activity` (`generating`, `tools`, `awaiting_approval`,
        `queued`, `waiting_for_model`; both null when idle)."""
        return self._checked(await self.raw.session_get(session_id))

    async def transcript(self, session_id: str, after_seq: int = 0) -> list[Event]:
        """Every stored event after `after_seq`, typed, in seq order (all pages)."""
        events: list[Event] = []
        after = after_seq
        while True:
            page = self._checked(await self.raw.transcript_get(session_id, after_seq=after))
            events.extend(validate_event(e) for e in page.get("events", []))
            if "next_after_seq" not in page:
                return events
            after = page["next_after_seq"]

    async def delete(self, session_id: str) -> SessionDeleted:
        """`session.delete`: the session removed from every store; the receipt
        (`deleted`, and `stores`: what each removed)."""
        return self._checked(await self.raw.session_delete(session_id))

    async def erase_user(self, user_id: str) -> UserErased:
        """`user.erase`: every session whose runs carried `user_id`, deleted; their receipts."""
        return self._checked(await self.raw.user_erase(user_id))

    async def export(self, session_id: str) -> dict[str, Any]:
        """`session.export`: the state and every stored event in one document."""
        return self._checked(await self.raw.session_export(session_id))

    async def tools(self) -> list[ToolListed]:
        """What the tools service knows now: name, description, input_schema, source."""
        reply = await self.raw.nc.request(self.raw.subjects.tools_list, b"{}", timeout=5.0)
        listed: ToolsListed = orjson.loads(reply.data)
        return list(self._checked(listed)["tools"])

    async def limits(self, model: str | None = None) -> list[LimitUsage]:
        """The model limits (LOOPWIRE_MODEL_LIMITS) and what each entry holds now: `key`,
        the limits, `in_flight`, `waiting`, `requests_last_60s`, `input_tokens_last_60s`,
        `cooldown_until`."""
        return list(self._checked(await self.raw.limits_usage(model))["limits"])

    async def sessions(self, status: str | None = None, limit: int = 100,
                       cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of sessions, most recently updated first, and the cursor of the next."""
        page = self._checked(await self.raw.sessions_list(status, limit, cursor))
        return list(page.get("sessions", [])), page.get("cursor")
