"""The public wire contract (docs/protocol.md) as pydantic models.

Input models ignore unknown fields and reject wrong types (strict mode), missing
required fields and unknown enum values. Output bodies always carry ``"v": 1``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loopwire.shared.contract.codec import now_rfc3339
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.redaction import redact

if TYPE_CHECKING:  # events.py imports this module (RunStatus)
    from .events import AnyEvent

PROTOCOL_VERSION = 1

Profile = Literal[
    "agentic", "agentic_planned", "turn_by_turn", "conversational",
    "claude_code", "opencode", "codex", "acp",
]
Permission = Literal["auto", "approve", "deny"]

FINISH_TOOL = "finish_agentic_task"
"""The reserved tool that ends an agentic run (services/router/core/finish.py)."""
UPDATE_PLAN_TOOL = "update_plan"
"""The reserved tool of agentic_planned's plan phase (services/router/core/planning.py)."""
RESERVED_TOOL_NAMES = frozenset({FINISH_TOOL, UPDATE_PLAN_TOOL})
"""Names the router answers itself: no provider and no in-process tool may take them."""
RunStatus = Literal["completed", "aborted", "budget_exhausted", "max_turns", "loop_terminated", "failed"]
SessionStatus = Literal["idle", "queued", "running", "awaiting_approval", "unknown"]

EVENT_KINDS = (
    "run.started", "phase.changed", "text.delta", "message", "tool.call", "tool.result",
    "retracted", "approval.requested", "loop.detected", "model.fallback", "compaction",
    "error", "run.ended",
)
ADDED_EVENT_KINDS = ("budget.warning", "user.message", "memory.observation", "memory.reflection",
                     "plan.updated", "generating", "tools.progress", "warning", "steering",
                     "approval.decided", "session.forked", "run.queued", "model.throttled")
"""Event kinds loopwire adds to the contract (docs/protocol.md marks them as additions)."""
EPHEMERAL_KINDS = frozenset({"text.delta", "generating", "tools.progress"})
"""Events of the moment: they take a seq and go out on the wire (and into the
LOOPWIRE_EVENTS stream) but are not kept in the transcript (`transcript.get`), whose
other events say the same thing for good (`message`, `tool.result`)."""


HEADER_VALUE = r"^[\x20-\x7e]{1,256}$"
"""A value loopwire passes on as a NATS header: 1-256 printable ASCII characters."""


def header_value(value: Any) -> str | None:
    """`value` when it can be passed on as a header (HEADER_VALUE), else None."""
    return value if isinstance(value, str) and re.fullmatch(HEADER_VALUE, value) else None


class IngressBody(BaseModel):
    """The base of every body a client publishes: unknown fields ignored, types strict."""

    model_config = ConfigDict(extra="ignore", strict=True)


class ModelSpec(IngressBody):
    primary: str | None = None
    """Model id of the first choice; the server default when omitted."""
    fallbacks: list[str] = Field(default_factory=list)
    """Tried in order when the primary fails with a retryable error."""
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=1)
    memory: str | None = None
    """Addition: the model of the memory's own calls (compaction summaries, observations,
    reflections); else the lightweight model (`selection: auto`), else LOOPWIRE_MEMORY_MODEL,
    else the run's models."""
    lightweight: str | None = None
    """The model of the lightweight work (plan building, memory's calls) when `selection`
    is `auto` (services/router/core/step_requests.py, its model tiers)."""
    selection: Literal["manual", "auto"] = "manual"
    """`manual`: every generation uses `primary` (then `fallbacks`); `auto`: the
    lightweight work uses `lightweight`."""
    prompt_cache: Literal["auto", "off"] = "auto"
    """`auto`: each request carries the prompt cache's breakpoints (tools, system, the
    conversation so far: services/llm/prompt_cache.py); `off`: none."""


class Limits(IngressBody):
    max_turns: int | None = Field(default=None, gt=0)
    """Model generations allowed in one run; the profile's default when omitted."""
    max_total_tokens: int | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, gt=0)
    context_window: int | None = Field(default=None, gt=0)
    compaction_at_pct: float | None = Field(default=None, gt=0, le=1)
    max_inner_iterations: int | None = Field(default=None, gt=0)
    """Addition: tool rounds in one outer iteration; at most the operator's cap
    (LOOPWIRE_MAX_INNER_ITERATIONS, else the profile's): a larger value is held to it."""
    max_outer_iterations: int | None = Field(default=None, gt=0)
    """Addition: outer iterations (follow-ups taken at the boundary) in one run; at most the
    operator's cap (LOOPWIRE_MAX_OUTER_ITERATIONS, else the profile's)."""
    progress_injection: Literal["system_reminder", "none"] | None = None
    """Addition: the progress reminder after each tool round (`system_reminder`) or none;
    the profile's default when omitted."""


class Strategy(IngressBody):
    actor: str | None = None
    expectation: str | None = None


class FinishTool(IngressBody):
    """Addition: the application's own finish tool, declared under the reserved name
    (StartRun or a strategy config `finish`): its description and input schema are offered
    instead of the built-in ones, and a call's input becomes the run's `conclusion` as given."""

    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]

    @field_validator("input_schema")
    @classmethod
    def _an_object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('the finish tool\'s input_schema must be a JSON Schema of "type": "object"')
        return value


class ExecutorChoice(IngressBody):
    """StartRun `executor` (profile `acp`): which of the operator's agents runs the loop."""

    agent: str | None = None
    """A name of LOOPWIRE_ACP_AGENTS; any other is refused (`unknown_agent`)."""


ContentBlocks = list[ContentBlock]


class InputMessage(IngressBody):
    role: Literal["user", "assistant"]
    content: str | ContentBlocks


class StartRun(IngressBody):
    v: int = PROTOCOL_VERSION
    profile: Profile = "agentic"
    input: str | list[InputMessage]
    system: str | None = None
    model: ModelSpec = Field(default_factory=ModelSpec)
    tools: list[str] | None = None
    tool_permissions: dict[str, Permission] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    plan: Any = None
    strategy: Strategy = Field(default_factory=Strategy)
    finish: bool | FinishTool | None = None
    """Addition: the reserved finish tool in the profiles that offer it: `false` leaves it
    out, an object declares the application's own under the same name (FinishTool); when
    omitted, the strategy config's `finish`, else the built-in tool."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    executor: ExecutorChoice | None = None
    """The external executors' profiles (`acp`): the agent, named by the operator's list."""
    user_id: str | None = Field(default=None, pattern=HEADER_VALUE)
    """Addition: who the run is for, as the client says (unverified by loopwire: an
    authenticated identity is the operator's, docs/security.md). Kept with the session
    (`session.get`) and passed to tool providers as the header `Loopwire-User-Id`;
    `metadata.workspace_id` likewise as `Loopwire-Workspace-Id`."""

    @field_validator("input")
    @classmethod
    def _input_not_empty(cls, value: str | list[InputMessage]) -> str | list[InputMessage]:
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("input must not be empty")
            return value
        if not value:
            raise ValueError("input must hold at least one message")
        if value[-1].role != "user":
            raise ValueError("the last input message must have role 'user'")
        if value[0].role != "user":
            raise ValueError("the first input message must have role 'user'")
        for prev, nxt in zip(value, value[1:], strict=False):
            if prev.role == nxt.role:
                raise ValueError("input messages must alternate between 'user' and 'assistant'")
        return value


class FollowUp(IngressBody):
    """Body of `message` and `steer`."""

    content: str | ContentBlocks

    @field_validator("content")
    @classmethod
    def _content_not_empty(cls, value: str | ContentBlocks) -> str | ContentBlocks:
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            raise ValueError("content must not be empty")
        return value


class Abort(IngressBody):
    reason: str = "aborted by client"


class ApprovalDecision(IngressBody):
    # Named `Decision` in the published schemas (docs/asyncapi.json), as before the rename.
    model_config = ConfigDict(extra="ignore", strict=True, title="Decision")

    checkpoint_id: str
    decision: Literal["approve", "deny"]
    note: str | None = None


INGRESS_MODELS: dict[str, type[IngressBody]] = {
    "start": StartRun,
    "message": FollowUp,
    "steer": FollowUp,
    "abort": Abort,
    "decision": ApprovalDecision,
}


class SessionGetRequest(IngressBody):
    session_id: str


class TranscriptGetRequest(IngressBody):
    session_id: str
    after_seq: int = Field(default=0, ge=0)
    limit: int = Field(default=1000, gt=0, le=10000)


class SessionsListRequest(IngressBody):
    """`<prefix>.api.sessions.list` (loopwire's addition, docs/protocol.md): sessions, most recently updated first."""

    status: Literal["idle", "queued", "running", "awaiting_approval"] | None = None
    """Only sessions in this status."""
    limit: int = Field(default=100, gt=0, le=1000)
    cursor: str | None = Field(default=None, max_length=256)
    """The `cursor` of the previous page (opaque)."""


class SessionForkRequest(IngressBody):
    """`<prefix>.api.session.fork`: a new idle session whose history is the source's as it
    stood at `at_seq` (services/router/shell/fork.py)."""

    session_id: str
    new_session_id: str
    at_seq: int | None = None
    """The source's event to fork at (inside a run: the last complete turn before it);
    omitted: its last event."""
    tools: Literal["live", "recorded"] = "live"
    """Addition: `recorded` answers the fork's tool calls from the source's recorded
    results (matched by tool name and input) instead of any tool provider: a replay."""


class SessionDeleteRequest(IngressBody):
    """`<prefix>.api.session.delete`: the session removed from every store loopwire keeps
    (services/router/shell/erasure.py)."""

    session_id: str


class UserEraseRequest(IngressBody):
    """`<prefix>.api.user.erase`: every session whose runs carried `user_id`, deleted."""

    user_id: str = Field(pattern=HEADER_VALUE)
    tenant: str | None = Field(default=None, max_length=128)
    """Addition: only that tenant's sessions (an operator's request; on a tenant's own
    subject, that tenant, another one is refused). Omitted: every tenant's."""


class SessionExportRequest(IngressBody):
    """`<prefix>.api.session.export`: the session's state and every stored event, in one
    document."""

    session_id: str


class LimitsUsageRequest(IngressBody):
    """`<prefix>.api.limits.usage`: the model limits (LOOPWIRE_MODEL_LIMITS) and what each
    key holds now, across every llm replica."""

    model: str | None = Field(default=None, max_length=256)
    """A model id: only the key it counts against (none: every key)."""


class TenantUsageRequest(IngressBody):
    """`<prefix>.api.tenant.usage` (or a tenant's own `<prefix>.api.<tenant>.tenant.usage`):
    what a tenant runs, waits for and spent today, and its limits."""

    tenant: str | None = Field(default=None, max_length=128)
    """The tenant (`*` or omitted without tenants: the whole deployment); on a tenant's own
    subject, that tenant (another one is refused)."""


def describe_validation_error(exc: ValidationError) -> str:
    """One readable line per problem: ``limits.max_turns: Input should be greater than 0``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def make_event(kind: str, session_id: str, run_id: str | None, *, seq: int, ts: str | None = None,
               **fields: Any) -> AnyEvent:
    """An egress event body: the common fields first, then the kind's own. An `error`'s
    message often quotes an exception: secrets in it (a URL's password, an API key) are
    masked before it is stored or published."""
    if kind == "error" and isinstance(fields.get("message"), str):
        fields["message"] = redact(fields["message"])
    # The envelope and `fields` (an emitter's, built through its kind's TypedDict) are the
    # kind's event.
    return cast("AnyEvent", {"v": PROTOCOL_VERSION, "session_id": session_id, "run_id": run_id, "seq": seq,
                             "kind": kind, "ts": ts or now_rfc3339(), **fields})


def error_reply(code: str, message: str) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "error": {"code": code, "message": redact(message)}}


def text_to_content(content: str | ContentBlocks) -> ContentBlocks:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content
