"""A query of the public contract decoded, or the error reply it gets: the same checks for
every service that answers one (the transcripts service's, the router's `session.fork`).

A query that came on a tenant's subject (`<prefix>.api.<tenant>.<query>`) names that
tenant's sessions only: a short id is the tenant's (`<sid>` is `<tenant>.<sid>`), and an id
of another tenant is refused; the tenant comes from the subject, which NATS permissions
restrict, never from the body.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from loopwire.shared.contract.input_guard import deeper_than, version_problem
from loopwire.shared.contract.protocol import (
    SessionDeleteRequest,
    SessionExportRequest,
    SessionForkRequest,
    SessionGetRequest,
    SessionsListRequest,
    TranscriptGetRequest,
    describe_validation_error,
    error_reply,
)
from loopwire.shared.contract.subjects import tenant_of, valid_session_id

__all__ = ["Q", "parse_query"]

Q = TypeVar("Q", SessionGetRequest, TranscriptGetRequest, SessionsListRequest, SessionForkRequest,
            SessionDeleteRequest, SessionExportRequest)

SESSION_ID_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    SessionGetRequest: ("session_id",),
    TranscriptGetRequest: ("session_id",),
    SessionForkRequest: ("session_id", "new_session_id"),
    SessionDeleteRequest: ("session_id",),
    SessionExportRequest: ("session_id",),
}
"""The fields of each query that name a session."""

FORBIDDEN_ELSEWHERE: frozenset[type[BaseModel]] = frozenset({SessionDeleteRequest, SessionExportRequest})
"""Queries whose id of another tenant's session is refused `forbidden` (the tenant may not
touch it), not `invalid_session_id`."""


def parse_query(data: bytes, model: type[Q], max_depth: int = 32, *, tenants: bool = False,
                tenant: str | None = None) -> Q | dict[str, Any]:
    """A request model, or the error reply to send back. `tenant`: the query came on that
    tenant's subject: the sessions it names are that tenant's (`<sid>` or
    `<tenant>.<sid>`), never another's."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return error_reply("bad_json", f"the request is not valid JSON: {exc}")
    if not isinstance(raw, dict):
        return error_reply("bad_request", "the request must be a JSON object")
    if deeper_than(raw, max_depth):
        return error_reply("body_too_deep", f"the request nests deeper than {max_depth} levels")
    problem = version_problem(raw)
    if problem is not None:
        return error_reply("unsupported_version", problem)
    try:
        req = model.model_validate(raw)
    except ValidationError as exc:
        return error_reply("invalid_request", describe_validation_error(exc))
    scoped: dict[str, str] = {}
    for name in SESSION_ID_FIELDS.get(model, ()):
        given = getattr(req, name)
        sid = given
        if tenant is not None:
            sid = sid if "." in sid else f"{tenant}.{sid}"
            if tenant_of(sid) != tenant:
                code = "forbidden" if model in FORBIDDEN_ELSEWHERE else "invalid_session_id"
                return error_reply(code, f"session {given!r} is not one of tenant {tenant}'s")
            scoped[name] = sid
        if not valid_session_id(sid, tenants):
            shape = "<tenant>.<sid>, each " if tenants else ""
            return error_reply("invalid_session_id", f"{name} must be {shape}1-128 characters of [A-Za-z0-9_-]")
    return req.model_copy(update=scoped) if scoped else req
