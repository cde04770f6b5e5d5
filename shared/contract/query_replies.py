"""The replies of the public queries (docs/protocol.md) as TypedDicts: what the services build
and what a client reads back, so both sides are checked against one declaration.

Any query may instead answer `{"v", "error": {"code", "message"}}` (protocol.error_reply):
each reply is `total=False` and names its `error` beside its own keys, so a client tests for
`"error"` before it reads the rest.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from loopwire.shared.contract.messages import Message


class ErrorBody(TypedDict):
    code: str
    message: str


class ForkedFromReply(TypedDict, total=False):
    """`session.get`'s `forked_from`: where the session was forked (`session_id` null and
    `source_gone` once the source was deleted)."""

    session_id: str | None
    seq: int | None
    cut_seq: int | None
    source_gone: bool


class Lineage(TypedDict):
    """`session.get`'s additions: where the session was forked from, and its forks."""

    forked_from: ForkedFromReply | None
    forks: list[str]


class SessionGot(TypedDict, total=False):
    """`session.get`: the session's status, usage and history, and where its run stands."""

    v: int
    session_id: str
    status: str
    profile: str | None
    turns: int
    usage: dict[str, int]
    cost_usd: float | None
    messages: list[Message]
    run_id: str | None
    runs: int
    plan: dict[str, Any] | None
    checkpoint_id: str | None
    user_id: str | None
    workspace_id: str | None
    tools_active: list[str] | None
    phase: str | None
    activity: str | None
    source: str
    """`transcript`: answered from the transcript, the state being gone."""
    forked_from: ForkedFromReply | None
    forks: list[str]
    error: ErrorBody


class StoreRemoved(TypedDict):
    store: str
    removed: int


class SessionDeleted(TypedDict, total=False):
    """`session.delete`'s receipt: whether anything was there, and what each store removed."""

    v: int
    session_id: str
    deleted: bool
    stores: list[StoreRemoved]
    resumed: bool
    """A delete that finished one cut short before."""
    error: ErrorBody


class UserErased(TypedDict, total=False):
    """`user.erase`: the receipt of each session deleted."""

    v: int
    user_id: str
    sessions: list[SessionDeleted]
    error: ErrorBody


class LimitUsage(TypedDict):
    """One LOOPWIRE_MODEL_LIMITS key: its limits and what it holds now across the replicas."""

    key: str
    rpm: int | None
    input_tpm: int | None
    output_tpm: int | None
    max_concurrent: int | None
    in_flight: int
    waiting: int
    requests_last_60s: int
    input_tokens_last_60s: int
    cooldown_until: float | None


class LimitsUsage(TypedDict, total=False):
    """`limits.usage`."""

    v: int
    limits: list[LimitUsage]
    error: ErrorBody


class ToolListed(TypedDict):
    name: str
    description: str
    input_schema: dict[str, Any]
    source: str


class ToolsListed(TypedDict, total=False):
    """`tools.list`: the published catalog, and the names two providers both offer."""

    tools: list[ToolListed]
    conflicts: list[dict[str, Any]]
    error: ErrorBody
