"""The transcripts service: answers `session.get`, `transcript.get`, `sessions.list`,
`session.export` (export.py) and `tenant.usage` (core request/reply, one queue group across replicas). The event log
itself is written by the emitting services through shared.event_log (seq assignment and
storage in one Lua call) and published to LOOPWIRE_EVENTS.

With tenants (LOOPWIRE_TENANTS) each query is also answered on
`<prefix>.api.<tenant>.<query>`, for that tenant's sessions only: the tenant comes from
the subject, which NATS permissions restrict, never from the body.

Queries are answered concurrently (QUERIES_AT_ONCE per subject and replica), never one
after the other: a query that waits on a store (a session with no state asks the
LOOPWIRE_EVENTS stream whether Redis lost it, a JetStream API request that a busy server
answers late) holds up no other query. Handled one at a time, one such read made every
poller behind it wait too, and clients polling a few sessions at 5/s each timed out
together. The stream is given ARCHIVE_READ_S: a query that needs it longer is answered
`unavailable` (ask again), before a client's own timeout, never left unanswered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from faststream.nats import NatsBroker

from loopwire.shared.contract import keys
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.protocol import (
    LimitsUsageRequest,
    SessionExportRequest,
    SessionGetRequest,
    SessionsListRequest,
    TenantUsageRequest,
    TranscriptGetRequest,
    error_reply,
)
from loopwire.shared.runtime.query_handler import QueryHandler, query_handler
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.runtime.settings import RuntimeSettings
from loopwire.shared.stores.event_archive import read_archive
from loopwire.shared.stores.model_budget import ModelLimitStore
from loopwire.shared.stores.tenant_quotas import TenantQuotaStore

from .export import ExportRefused, session_export
from .limits_usage import limits_usage
from .queries import StoreUnavailable, session_get, transcript_get
from .sessions_list import sessions_list
from .tenant_usage import tenant_usage

log = logging.getLogger("loopwire.transcripts")

QUERIES_AT_ONCE = 32
"""Queries of one subject a replica works on at once (more wait in its subscription)."""
ARCHIVE_READ_S = 2.0
"""How long a query may wait for the events stream (a client's request timeout is
typically 5 s: the CLI's, loopwire.Client's)."""

Answer = Callable[[Any, str | None], Awaitable[Mapping[str, object]]]
"""A query's answer from its request and the tenant of its subject (None: none)."""


class TranscriptsService:
    name = "transcripts"

    def __init__(self, ctx: ServiceContext[RuntimeSettings]) -> None:
        self.ctx = ctx
        self._quotas = TenantQuotaStore(ctx.redis)
        self._limits = ctx.settings.limits_table()
        self._model_limits = ctx.settings.model_limits_table()
        self._budget = ModelLimitStore(ctx.redis)

    def register(self, broker: NatsBroker) -> None:
        queue = f"{self.ctx.settings.subject_prefix}-transcripts"
        subjects = self.ctx.subjects
        queries: dict[str, tuple[type[Any], Answer]] = {
            "session.get": (SessionGetRequest,
                            lambda req, _: session_get(req, self.ctx.sessions, self.ctx.events, archive=self._archive,
                                                      model_waiting=self._model_waiting)),
            "transcript.get": (TranscriptGetRequest, lambda req, _: transcript_get(req, self.ctx.events, self._archive)),
            "sessions.list": (SessionsListRequest, lambda req, tenant: sessions_list(req, self.ctx.sessions, tenant)),
            "session.export": (SessionExportRequest, lambda req, _: session_export(
                req, self.ctx.sessions, self.ctx.events, blobs=self.ctx.blobs, archive=self._archive)),
            "tenant.usage": (TenantUsageRequest, lambda req, tenant: tenant_usage(
                req, self._quotas, self._limits, subject_tenant=tenant)),
        }
        # The model limits are the deployment's, the operator's to read: no tenant subject.
        broker.subscriber(subjects.query("limits.usage"), queue=queue, max_workers=QUERIES_AT_ONCE)(
            self._handler("limits.usage", LimitsUsageRequest,
                          lambda req, _: limits_usage(req, self._budget, self._model_limits), tenant_scoped=False))
        for name, (model, answer) in queries.items():
            broker.subscriber(subjects.query(name), queue=queue, max_workers=QUERIES_AT_ONCE)(
                self._handler(name, model, answer, tenant_scoped=False))
            if self.ctx.settings.tenants:
                broker.subscriber(subjects.query(name, tenant="*"), queue=queue, max_workers=QUERIES_AT_ONCE)(
                    self._handler(name, model, answer, tenant_scoped=True))

    async def _archive(self, sid: str) -> list[AnyEvent]:
        """The session's events from the LOOPWIRE_EVENTS stream (Redis lost its log)."""
        try:
            return await asyncio.wait_for(read_archive(self.ctx.bus.js, self.ctx.subjects, sid), ARCHIVE_READ_S)
        except TimeoutError as exc:  # asyncio's, and nats' own (a subclass)
            raise StoreUnavailable(f"the events stream did not answer within {ARCHIVE_READ_S:g} s") from exc

    async def _model_waiting(self, sid: str) -> bool:
        """A generation of the session waits for the model limits (services/llm/limiter.py)."""
        return bool(self._model_limits.entries) and bool(await self.ctx.redis.exists(keys.model_wait(sid)))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def _handler(self, name: str, model: type[Any], answer: Answer, *, tenant_scoped: bool) -> QueryHandler:
        def unavailable(exc: Exception) -> dict[str, Any] | None:
            if isinstance(exc, ExportRefused):
                return error_reply(exc.code, str(exc))
            if not isinstance(exc, StoreUnavailable):
                return None
            log.warning("%s: %s", name, exc)
            return error_reply("unavailable", f"{exc}; ask again")

        return query_handler(name, model, answer, subjects=self.ctx.subjects, settings=self.ctx.settings,
                             tenant_scoped=tenant_scoped, refusal=unavailable)
