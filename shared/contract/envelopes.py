"""Internal envelopes: one pydantic model per work subject, versioned, discriminated on `kind`.

The path of one turn (docs/architecture.md)::

    router --AssembleContext--> memory --Generate--> llm --GenerationResult--> router
    router --ExecuteTools--> tools --ToolsResult--> router

Every envelope carries `step_id`, the idempotency key of the step: a redelivered
envelope whose result is already recorded (Redis keys.step_record) is answered
from the record instead of calling the model or the tool again. New fields may be
added with defaults (older readers ignore them); a breaking change bumps `v`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from loopwire.shared.contract.event_fields import EventUsage, ToolResultFields, tool_result_event
from loopwire.shared.contract.messages import Content, Message

ENVELOPE_VERSION = 1


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore")

    v: int = ENVELOPE_VERSION
    session_id: str
    run_id: str
    step_id: str
    """Idempotency key of this step: `<run_id>:<turn>:<g|t><attempt>`."""
    turn: int = 0
    trace: dict[str, str] = Field(default_factory=dict)
    """W3C trace context (traceparent/tracestate) of the run's trace."""


class ToolSpec(BaseModel):
    """A tool as offered to the model."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolCall(BaseModel):
    tool_use_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    """tool_use_ids this call waits for (set by callers that know the order)."""


class ToolResultItem(BaseModel):
    tool_use_id: str
    name: str
    content: Content = ""
    is_error: bool = False
    recorded: bool = False
    """Answered from a recording (a fork with recorded tools): no tool ran."""

    def event_fields(self, turn: int) -> ToolResultFields:
        """The fields of this result's `tool.result` event (event_fields.tool_result_event)."""
        return tool_result_event(turn=turn, tool_use_id=self.tool_use_id, name=self.name, is_error=self.is_error,
                                 content=self.content, recorded=self.recorded)


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def total_input(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def event_usage(self) -> EventUsage:
        """The `usage` of a `run.ended`: all input, the output, and the prompt cache's share."""
        return {"input_tokens": self.total_input(), "output_tokens": self.output_tokens,
                "cache_read_input_tokens": self.cache_read_input_tokens,
                "cache_creation_input_tokens": self.cache_creation_input_tokens}

    def cache_fields(self) -> dict[str, int]:
        """The prompt cache's share of the input, as events report it beside `input_tokens`
        (which counts all input, cached included)."""
        return {"cache_read_input_tokens": self.cache_read_input_tokens,
                "cache_creation_input_tokens": self.cache_creation_input_tokens}

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    def add_to(self, *totals: Usage) -> tuple[Usage, ...]:
        """Each of `totals` with this usage added: one call's usage counted in every ledger
        it belongs to (the run's and the session's: services/router/core/accounting.py)."""
        return tuple(total + self for total in totals)


class ExecutorSpec(BaseModel):
    """An external executor's step (profiles claude_code, opencode, codex, acp): what the
    llm service needs to run the agent, decided by the router (services/llm/executors)."""

    profile: str
    agent: str | None = None
    """`acp`: the agent's name (LOOPWIRE_ACP_AGENTS)."""
    workspace: str | None = None
    """The run's workspace, an absolute path the router checked against
    LOOPWIRE_WORKSPACE_ROOTS; None: the session's own directory."""
    permissions: dict[str, str] = Field(default_factory=dict)
    """The run's tool permissions over the operator's policy, applied to the agent's own
    tools and to loopwire's by name."""
    max_turns: int | None = None
    """The agent's model turns left in the run."""
    max_total_tokens: int | None = None
    """Tokens left in the run's budget (None: no limit)."""
    max_cost_usd: float | None = None
    """Dollars left in the run's budget (None: no limit)."""
    context_tokens: int = 0
    """The agent's context size after its last turn, as it reported it."""
    compaction_at_pct: float = 0.8
    context_window: int = 200_000
    user_id: str | None = None
    """StartRun `user_id`: the loopwire tools the agent calls get it as `Loopwire-User-Id`."""
    workspace_id: str | None = None
    """StartRun `metadata.workspace_id`: likewise as `Loopwire-Workspace-Id`."""


class StepError(BaseModel):
    """A failed step, as data (Temporal's ApplicationError, in spirit)."""

    code: str
    """`model_overloaded`, `rate_limited`, `bad_request`, `auth`, `timeout`, `connection`, `internal`..."""
    message: str
    retryable: bool = False
    status: int | None = None
    model: str | None = None


# -- router -> memory ---------------------------------------------------------------------
class AssembleContext(_Envelope):
    kind: Literal["memory.assemble"] = "memory.assemble"
    history_len: int
    """Number of history messages (Redis keys.session_history) this generation sees."""
    system: str | None = None
    ephemeral_notes: list[str] = Field(default_factory=list)
    """System reminders for this generation only; never stored in the history."""
    tools: list[str] | None = None
    """Names the run may use (None: every known tool)."""
    offer_tools: bool = True
    """False for a converging last generation: the model must answer in text."""
    models: list[str]
    """Primary first, then fallbacks."""
    max_tokens: int
    temperature: float | None = None
    extra_tools: list[ToolSpec] = Field(default_factory=list)
    """Tools that are not served by the tools service (e.g. the reserved finish tool)."""
    reduce_context: bool = False
    """Set on the retry after a `context_too_long` error: the memory service shrinks the
    history it sends (older turns dropped or summarised) so the request fits the model's
    window. Default off; the router sets it at most `context_retries` times per run."""
    context_window: int = 200_000
    """The run's `limits.context_window`: the memory service keeps the request under it."""
    compaction_at_pct: float = 0.8
    """The run's `limits.compaction_at_pct`: the share of the window that triggers compaction."""
    actor: str | None = None
    """The run's `strategy.actor`: observations and reflections are kept per actor too."""
    memory_model: str | None = None
    """The model of memory's own calls for this run (StartRun `model.memory`, else
    LOOPWIRE_MEMORY_MODEL); None: the run's `models`."""
    executor: ExecutorSpec | None = None
    """Set in the external executors' profiles: an agent answers this step, not a model."""
    prompt_cache: Literal["auto", "off"] = "auto"
    """The run's `model.prompt_cache`: whether the request carries cache breakpoints."""
    prompt_cache_ttl: Literal["5m", "1h"] = "5m"
    """How long the breakpoints' prefixes are kept: `1h` for a run that may wait on an
    approval (longer than the 5 minutes a cached prefix otherwise lasts)."""
    result_to: str | None = None
    """The router replica that sent this step's work (passed on in `Generate`): its
    result goes to that replica directly (`Subjects.direct`), JetStream when it does not
    answer. None: JetStream."""


# -- memory -> llm ------------------------------------------------------------------------
class Generate(_Envelope):
    kind: Literal["llm.generate"] = "llm.generate"
    models: list[str]
    system: str | None = None
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int
    temperature: float | None = None
    extra_usage: Usage | None = None
    """Tokens the memory service spent for this step (summaries, observations): the llm
    service copies it into the GenerationResult, the router adds it to the run's usage."""
    extra_model: str | None = None
    """The model `extra_usage` was spent on, for its price (None: this step's model)."""
    executor: ExecutorSpec | None = None
    """`AssembleContext.executor`, passed through: an agent answers this step."""
    result_to: str | None = None
    """`AssembleContext.result_to`, passed through: where the result goes first."""
    prompt_cache: Literal["auto", "off"] = "off"
    """`auto`: the llm service places the prompt cache's breakpoints, from `stable_system`
    and `notes` (services/llm/prompt_cache.py). Absent (a memory replica of an earlier
    release): `off`, and `system` as it is."""
    prompt_cache_ttl: Literal["5m", "1h"] = "5m"
    """`AssembleContext.prompt_cache_ttl`, passed through (absent: an earlier release's, 5m)."""
    stable_system: str | None = None
    """`system` without the step's ephemeral notes: what stays the same from one request of
    a run to the next, so it can sit before a breakpoint."""
    notes: list[str] = Field(default_factory=list)
    """The step's ephemeral notes (also inside `system`, for an llm replica of an earlier
    release): with the cache they go after its last breakpoint."""
    input_tokens: int | None = None
    """The memory service's count of the request's input tokens, for the model limits
    (None: the llm service estimates it)."""
    no_refs: bool = False
    """The memory service found no content by reference (shared/stores/blobs.py) in
    `messages`: the llm service does not look for any. False: it looks (resolve_messages)."""


# -- llm -> router ------------------------------------------------------------------------
class GenerationResult(_Envelope):
    kind: Literal["llm.result"] = "llm.result"
    ok: bool = True
    message: Message | None = None
    """`{"role": "assistant", "content": [blocks]}`."""
    stop_reason: str | None = None
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    error: StepError | None = None
    fallbacks: list[dict[str, str]] = Field(default_factory=list)
    """Model switches made while producing this result: {from_model, to_model, reason}."""
    extra_usage: Usage | None = None
    """`Generate.extra_usage`, passed through: tokens spent on this step besides the model
    call itself (memory's summaries); the router adds it to the run's usage and cost."""
    extra_model: str | None = None
    """`Generate.extra_model`, passed through."""
    turns: int = 1
    """Model calls this step made: an external agent's own turns (executors), else 1."""
    cost_usd: float | None = None
    """What the step cost as an external agent reported it; None: priced by loopwire."""


class ExecutorPermission(_Envelope):
    """llm -> router, while an external agent's step runs: the agent asks before running
    a tool whose permission is `approve`. The router opens a durable checkpoint
    (`approval.requested`); the `decision` goes back as a notice on
    `<prefix>.ctl.<sid>.permission`. Sent again while the agent waits (a notice may be
    lost): the router answers a decided checkpoint with its decision again."""

    kind: Literal["llm.permission"] = "llm.permission"
    checkpoint_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0
    """How many times this request was sent before (each is an input of its own)."""


# -- router -> tools ----------------------------------------------------------------------
class ExecuteTools(_Envelope):
    kind: Literal["tools.execute"] = "tools.execute"
    calls: list[ToolCall]
    denied: dict[str, str] = Field(default_factory=dict)
    """tool_use_id -> reason for calls that must not run (permission `deny`)."""
    user_id: str | None = None
    """StartRun `user_id`: the providers' `Loopwire-User-Id` header."""
    workspace_id: str | None = None
    """StartRun `metadata.workspace_id`: the providers' `Loopwire-Workspace-Id` header."""
    recording: str | None = None
    """A fork with recorded tools (a replay): the session whose recorded results answer
    these calls, matched by tool name and input; no tool provider is called."""
    result_to: str | None = None
    """The router replica that sent this step's work: its result goes to that replica
    directly (`Subjects.direct`), JetStream when it does not answer. None: JetStream."""
    report_calls: bool = False
    """The router takes a `ToolCallFinished` for each call of a batch of several as it
    finishes (a router of this version sets it). A router that does not ask (an older one,
    during a rolling upgrade) is sent none, which it could not decode: it emits every
    call's events with the batch's `ToolsResult` (`results_reported` false), at the end."""


# -- tools -> router ----------------------------------------------------------------------
class ToolsResult(_Envelope):
    kind: Literal["tools.result"] = "tools.result"
    results: list[ToolResultItem]
    """One per call, in the model's order."""
    results_reported: bool = True
    """Whether the tools service emitted each result's `tool.result` event itself. Kept on
    the wire for a rolling upgrade only: a tools service of this version sends false (the
    router emits every result's events: those of the calls a `ToolCallFinished` reported
    as they finished, then the rest with the step's transition, also when the result
    comes too late to be applied), while true comes from an older one, which emitted the
    events of a batch of several calls itself: the router does not emit them again."""


class ToolCallFinished(_Envelope):
    """tools -> router, as each call of a batch of several finishes, in finishing order
    (before the batch's ToolsResult): the router emits the call's `tool.result` and
    `tools.progress` while the other calls run, and remembers it reported them."""

    kind: Literal["tools.call_finished"] = "tools.call_finished"
    result: ToolResultItem
    total: int
    """How many calls the batch has (`tools.progress.total`)."""


# -- router -> router ---------------------------------------------------------------------
class TenantAdmission(_Envelope):
    """A tenant's answer for a run that waits for a slot (services/router/core/admission.py),
    sent by the router that freed the slot (or by the tenants' sweep) to whichever router
    takes it: durable, so a crash before the run started redelivers it. `step_id`: the
    answer's own id (message_ids.admission_id), the same from every sender."""

    kind: Literal["tenant.admission"] = "tenant.admission"
    verdict: Literal["granted", "queued", "refused"]
    position: int = 0


# -- memory -> llm: exact token counts (core request/reply, or a call in process) --------
class CountTokens(BaseModel):
    """How many input tokens a request holds by its model's own tokenizer: the memory
    service asks the llm service on `<prefix>.rpc.llm.count_tokens` (services/llm/token_count.py)."""

    model: str
    system: str | None = None
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)


class TokenCount(BaseModel):
    """The answer: `input_tokens`, or why there is none."""

    input_tokens: int | None = None
    status: int | None = None
    """The HTTP status the count_tokens endpoint refused with: 400, this request cannot be
    counted; any other, the endpoint is not available now."""
    error: str | None = None
    """Why there is no count (no status: the endpoint is not configured or not reachable)."""


WorkEnvelope = Annotated[
    AssembleContext | Generate | GenerationResult | ExecuteTools | ToolsResult | ToolCallFinished
    | ExecutorPermission | TenantAdmission,
    Field(discriminator="kind"),
]
StepResult = Annotated[GenerationResult | ToolsResult | ToolCallFinished | ExecutorPermission | TenantAdmission,
                       Field(discriminator="kind")]
HandedResult = GenerationResult | ToolsResult | ToolCallFinished | ExecutorPermission
"""What a service hands to the router (a `call` route of shared/runtime/dispatcher.py)."""

WORK_ADAPTER: TypeAdapter[Any] = TypeAdapter(WorkEnvelope)
STEP_RESULT_ADAPTER: TypeAdapter[Any] = TypeAdapter(StepResult)
