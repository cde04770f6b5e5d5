"""The one shape of a query a service answers over core request/reply (`<prefix>.api.*`):
the request parsed and checked as the contract says (shared/contract/query_parsing.py;
a bad one answered with its error), the answer as JSON, a refusal the service names
answered with its code, and anything else answered `internal` and logged."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from faststream.nats import NatsMessage

from loopwire.shared.contract.protocol import error_reply
from loopwire.shared.contract.query_parsing import Q, parse_query
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.settings import RuntimeSettings

log = logging.getLogger("loopwire.queries")

QueryHandler = Callable[[NatsMessage], Awaitable[bytes]]


def _no_refusal(exc: Exception) -> dict[str, Any] | None:
    return None


def query_handler(name: str, model: type[Q], answer: Callable[[Q, str | None], Awaitable[Any]], *,
                  subjects: Subjects, settings: RuntimeSettings, tenant_scoped: bool,
                  refusal: Callable[[Exception], dict[str, Any] | None] = _no_refusal) -> QueryHandler:
    """The handler of the query `name`: `answer(request, tenant)` (the tenant of the
    subject when `tenant_scoped`, else None). `refusal(exc)`: the reply for an exception
    the service expects (None: not one of those)."""

    async def handle(msg: NatsMessage) -> bytes:
        tenant = subjects.tenant_of_query(msg.raw_message.subject) if tenant_scoped else None
        req = parse_query(msg.body, model, settings.max_body_depth, tenants=settings.tenants, tenant=tenant)
        if isinstance(req, dict):
            return orjson.dumps(req)
        try:
            return orjson.dumps(await answer(req, tenant))
        except Exception as exc:
            refused = refusal(exc)
            if refused is not None:
                return orjson.dumps(refused)
            log.exception("%s failed", name)
            return orjson.dumps(error_reply("internal", f"{name} failed: {exc}"))

    handle.__name__ = f"on_{name.replace('.', '_')}{'_of_tenant' if tenant_scoped else ''}"
    return handle
