"""Each egress event's own fields, declared once as TypedDicts: the emitters build them
(mypy checks the names and types at every emit site), the readers of an event read them
(events.py joins them to the envelope), and events.py builds the pydantic models of
docs/asyncapi.json from them. A `Field` in an `Annotated` carries the description and the
constraints the document shows; a `NotRequired` field is an addition an event carries only
when it has a value (the models document it as nullable, default null)."""

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

# Relative: mypy, run over the folders, resolves a sibling module but not its `loopwire.` name.
from .messages import Content, Message
from .protocol import RunStatus

Source = Literal["executor"]
"""`source` of an event an external agent's own model call or tool produced."""
SteeringSource = Literal["priority_queue", "follow_up_queue", "loop_redirect", "model_switch",
                         "retry_reduced_context"]
PlanSource = Literal["start", "model", "text", "fallback", "verification", "executor"]


class Undocumented:
    """The marker, in a field's `Annotated`, of a field the events carry that
    docs/asyncapi.json does not show (the models leave it out; it passes as an extra)."""


UNDOCUMENTED = Undocumented()
Escalation = Literal["redirect", "switch_model", "terminate"]
PlanStatus = Literal["pending", "in_progress", "completed"]
ThrottleReason = Literal["rpm", "input_tpm", "output_tpm", "concurrency", "cooldown"]
BudgetLimit = Literal["max_total_tokens", "max_cost_usd"]
_EXECUTOR_TOOL = "Addition: `executor` for an external agent's own tool (profiles claude_code, ...)."


class EventUsage(TypedDict):
    input_tokens: int
    # All input, read from or written to the prompt cache included.
    output_tokens: int
    cache_read_input_tokens: NotRequired[Annotated[int, Field(description=(
        "Addition: the part of `input_tokens` read from the prompt cache."))]]
    cache_creation_input_tokens: NotRequired[Annotated[int, Field(description=(
        "Addition: the part of `input_tokens` written to the prompt cache."))]]


class PlanStep(TypedDict):
    step: str
    status: PlanStatus


class SubagentLineage(TypedDict, total=False):
    """A child run's (a sub-agent's) lineage on its `run.started` (services/router/core/run_config.py)."""

    parent_session_id: Annotated[str | None, UNDOCUMENTED]
    parent_tool_use_id: Annotated[str | None, UNDOCUMENTED]
    subagent_depth: Annotated[int, UNDOCUMENTED]


class RunStartedFields(SubagentLineage):
    profile: str
    ignored_fields: NotRequired[Annotated[list[str], Field(description=(
        "Addition: StartRun fields the request carried that loopwire does not know and ignored "
        "(`tool_permission`, `limits.max_turn`); absent when there were none."))]]
    config: NotRequired[Annotated[dict[str, Any], Field(description=(
        "Addition: what the run was started with as loopwire resolved it (profile, system, models, max_tokens, "
        "temperature, tools, tool_permissions, limits, strategy, metadata): a rebuilt session's next run "
        "starts with it."))]]


# `from` is a keyword: the functional form names it.
PhaseChangedFields = TypedDict("PhaseChangedFields", {"from": str, "to": str})


class TextDeltaFields(TypedDict):
    turn: int
    text: str


class MessageFields(TypedDict):
    turn: int
    message: Annotated[Message, Field(description='{"role": "assistant", "content": [blocks]}')]
    model: str | None
    stop_reason: str | None
    usage: EventUsage
    source: NotRequired[Annotated[Source, Field(description=(
        "Addition: `executor` for a model call of an external agent that used tools."))]]


class ToolCallFields(TypedDict):
    turn: int
    tool_use_id: str
    name: str
    input: dict[str, Any]
    source: NotRequired[Annotated[Source, Field(description=_EXECUTOR_TOOL)]]


class ToolResultFields(TypedDict):
    turn: int
    tool_use_id: str
    name: str
    is_error: bool
    content: Content
    source: NotRequired[Annotated[Source, Field(description=_EXECUTOR_TOOL)]]
    recorded: NotRequired[Annotated[bool, Field(description=(
        "Addition: true when the result came from the recording of a fork's source (a replay with "
        "recorded tools): no tool ran."))]]


class RetractedFields(TypedDict):
    turn: int
    reason: str


class ApprovalRequestedFields(TypedDict):
    checkpoint_id: str
    tool_calls: NotRequired[Annotated[list[dict[str, Any]], Field(
        description='The calls the decision is about: [{"tool_use_id", "name", "input"}].')]]
    proposal: NotRequired[Annotated[Any, Field(description="turn_by_turn: the reply's text, when it calls no tool.")]]
    turn: NotRequired[Annotated[int, Field(description="Addition: the turn that asked.")]]
    source: NotRequired[Annotated[Source, Field(
        description="Addition: an external agent asks before running a tool; it waits in its turn.")]]


class ApprovalDecidedFields(TypedDict):
    """Addition: the `decision` that answered a checkpoint was applied, so the transcript
    holds every human decision, and shows that a run no longer waits on it."""

    checkpoint_id: str
    decision: Literal["approve", "deny"]
    note: NotRequired[str | None]


class LoopDetectedFields(TypedDict):
    detection: str
    escalation: Escalation
    occurrences: NotRequired[Annotated[int, Field(description=(
        "Addition: how many times the pattern occurred in a row (turns with the same call or answer, "
        "repetitions of the cycle)."))]]
    to_model: NotRequired[Annotated[str, Field(description="Addition: the fallback model the switch rung chose.")]]
    temperature: NotRequired[Annotated[float, Field(description=(
        "Addition: the raised temperature of a switch rung without a fallback model."))]]
    action: NotRequired[Annotated[Literal["pass_through"], UNDOCUMENTED]]
    """The same empty answer again: passed through as the run's answer."""


class SteeringFields(TypedDict):
    """The loop changed course (shared/protocol.md, "Phases, answers and progress"): where
    it took one of the paths that steer a run, named by `source`."""

    source: Annotated[SteeringSource, Field(description=(
        "`priority_queue`: a steer applied; `follow_up_queue`: queued messages taken at the outer "
        "boundary; `loop_redirect`: the loop ladder's redirect; `model_switch`: the run's next "
        "model (or, without one, a raised temperature); `retry_reduced_context`: the generation "
        "asked again with a reduced context."))]
    turn: NotRequired[Annotated[int, Field(description="Addition: the run's completed generations at that point.")]]
    reason: NotRequired[Annotated[str, Field(description=(
        "Addition: why: the loop detection, or the error code of the failed generation."))]]
    messages: NotRequired[Annotated[int, Field(description="Addition: `follow_up_queue`: how many queued messages "
                                                           "were taken.")]]
    to_model: NotRequired[Annotated[str, Field(description=(
        "Addition: `model_switch`: the model the run goes on with."))]]
    temperature: NotRequired[Annotated[float, Field(description=(
        "Addition: `model_switch` without a fallback model: the raised temperature."))]]
    interrupted: NotRequired[Annotated[Literal["generation", "tools", "approval"], Field(description=(
        "Addition: `priority_queue`: what the steer cut short: the generation in flight (dropped, `retracted`), "
        "the tool calls executing (cancelled, each answered \"cancelled by steering\"), or the open approval "
        "checkpoint (withdrawn); absent when the run was between steps."))]]


class ModelFallbackFields(TypedDict):
    from_model: str
    to_model: str
    reason: str


class ModelThrottledFields(TypedDict):
    """Addition: a generation waits for the model limits (LOOPWIRE_MODEL_LIMITS) before its
    `generating`; waiting is neither an error nor a reason for a fallback."""

    turn: int
    model: str
    reason: ThrottleReason
    wait_s: Annotated[float, Field(description="The expected wait in seconds (0: until a request in flight ends).")]


class CompactionFields(TypedDict):
    tokens_before: int
    tokens_after: int
    method: NotRequired[Annotated[str, Field(description=(
        "Addition: summary or drop; for an external agent agent_manual or agent_auto (its own compaction), "
        "fresh_session (a new agent session told a trimmed transcript)."))]]
    messages_compacted: NotRequired[Annotated[int, Field(description="Addition: history messages it covers.")]]


class BudgetWarningFields(TypedDict):
    """Addition: a run crossed LOOPWIRE_BUDGET_WARNING_PCT of one of its limits."""

    limit: BudgetLimit
    used: float
    max: float
    pct: float


class UserMessageFields(TypedDict):
    """Addition: a message the router added to the history that the model did not write
    (the user's input, a follow-up, a steer, a redirect, tool results), so the transcript
    alone can rebuild the session (services/router/shell/rebuild.py)."""

    turn: int
    message: Message
    source: Annotated[str, Field(description="input, follow_up, steer or router")]


class GeneratingFields(TypedDict):
    """Addition: a generation has started (again after a model fallback), so a UI can show
    that the model is working before its first text. Not kept in the transcript."""

    turn: int
    model: Annotated[str, Field(description="The model asked.")]


class ToolsProgressFields(TypedDict):
    """Addition: one more of the calls of a turn has finished (after its `tool.result`).
    Not kept in the transcript."""

    turn: int
    total: Annotated[int, Field(ge=1, description="The calls of this turn the tools service runs.")]
    completed: Annotated[int, Field(ge=1, description="How many of them have finished.")]


# Addition: an observation or reflection of the memory service. docs/asyncapi.json documents
# a note by its common fields only (MemoryNoteFields, no description); its own fields are
# typed below for their emitter and readers.
class MemoryNoteFields(TypedDict):
    pass


class MemoryObservationFields(TypedDict):
    observation: str
    from_message: int
    to_message: int
    actor: str | None


class MemoryReflectionFields(TypedDict):
    reflection: str
    observations: int
    actor: str | None


class PlanUpdatedFields(TypedDict):
    """Addition: an agentic_planned run's plan was recorded or changed (docs/profiles.md)."""

    steps: list[PlanStep]
    source: Annotated[PlanSource, Field(
        description="Where this version came from: StartRun `plan`, an update_plan call, the model's text, "
                    "the task itself (no plan given), the verify phase (with `verification`), or an external "
                    "agent's own plan (profile acp).")]
    phase: Annotated[str, Field(description="The run's profile phase after the update.")]
    verification: NotRequired[str | None]


class WarningFields(TypedDict):
    """Addition: something the user should know that does not stop the run: `unknown_price`
    (a model with no known price: `run.ended.cost_usd` is null), `unknown_tools` (the run
    named tools nobody serves), `tenant_unpriced` (such a model's cost is not counted
    against its tenant's `usd_per_day`, only its tokens)."""

    code: str
    message: str
    tools: NotRequired[Annotated[list[str], UNDOCUMENTED]]
    """`unknown_tools`: the tools nobody serves."""
    limits: NotRequired[Annotated[list[str], UNDOCUMENTED]]
    """`limit_above_ceiling`: the limits held to the operator's cap."""


class ErrorFields(TypedDict):
    code: str
    message: str
    action: NotRequired[Annotated[str, UNDOCUMENTED]]
    """A failed step's: what the run does next (services/router/core/error_policy.py)."""
    model: NotRequired[Annotated[str, UNDOCUMENTED]]
    """A start refused for a model with no known price: that model."""
    limit: NotRequired[Annotated[str, Field(description=(
        "Addition: for `quota_exceeded`, the tenant limit that refused the start (`max_queued`, "
        "`tokens_per_day`, `usd_per_day`)."))]]


class RunQueuedFields(TypedDict):
    """Addition: the run waits for a slot of its tenant (LOOPWIRE_TENANT_LIMITS `max_running`);
    `run.started` follows when it gets one, or `run.ended` (`aborted`) when it is aborted first."""

    position: Annotated[int, Field(ge=1, description="Its place in its tenant's queue (1: next to start).")]


class RunEndedFields(TypedDict):
    status: RunStatus
    final_text: str
    conclusion: NotRequired[Annotated[Any, Field(description=(
        "The finish tool's normalised input (docs/profiles.md): summary, confidence, classification, "
        "findings (raise/clear), outputs (output proposals); else, for a run that ends max_turns, "
        "budget_exhausted or loop_terminated, and for a text answer where a strategy asks for a conclusion, "
        "the technical summary {summary, ...} with `executed` [{tool, calls, ok, error}] (loopwire's addition, "
        "docs/protocol.md)."))]]
    turns: int
    usage: EventUsage
    cost_usd: Annotated[float | None, Field(description=(
        "Addition: null when a model of the run has no known price (a `warning` event said so)."))]
    reason: NotRequired[Annotated[str, Field(description="Addition: why the run did not simply complete.")]]
    message_count: NotRequired[Annotated[int, Field(description=(
        "The messages in the session's history after the run (2026-12-02)."))]]


class SessionForkedFields(TypedDict):
    """The first event of a fork (`<prefix>.api.session.fork`): its history is its
    source's as it stood at `from_seq` (inside a run: at the last complete turn, `cut_seq`)."""

    from_session_id: str
    from_seq: Annotated[int, Field(description="The source's event the fork was asked at.")]
    cut_seq: NotRequired[Annotated[int, Field(description=(
        "Addition: the source's last event the fork's history includes (0: none of the source's own)."))]]
    messages: NotRequired[Annotated[int, Field(description="Addition: the history messages the fork starts with.")]]
    config: NotRequired[Annotated[dict[str, Any] | None, Field(description=(
        "Addition: the run settings the fork keeps (those of the run `from_seq` belongs to), as on run.started."))]]
    tools: NotRequired[Annotated[Literal["live", "recorded"], Field(description=(
        "Addition: `recorded`: the fork's tool calls are answered from the source's recorded results."))]]


def tool_result_event(*, turn: int, tool_use_id: str, name: str, is_error: bool,
                      content: Content, recorded: bool = False,
                      source: Source | None = None) -> ToolResultFields:
    """The fields of the `tool.result` event of one call, whoever emits it: the router (a
    reserved tool it answers, and every call of a batch the tools service ran, as its
    ToolCallFinished or the batch's ToolsResult comes back: ToolResultItem.event_fields),
    the tools service (a direct call), the llm service (an external agent's own tool call,
    `source="executor"`). `recorded` (answered from a recording) and `source` only when set."""
    fields: ToolResultFields = {"turn": turn, "tool_use_id": tool_use_id, "name": name, "is_error": is_error,
                                "content": content}
    if recorded:
        fields["recorded"] = True
    if source is not None:
        fields["source"] = source
    return fields


EventFields = (RunStartedFields | PhaseChangedFields | TextDeltaFields | MessageFields | ToolCallFields
               | ToolResultFields | RetractedFields | ApprovalRequestedFields | ApprovalDecidedFields
               | LoopDetectedFields | SteeringFields | ModelFallbackFields | ModelThrottledFields | CompactionFields
               | BudgetWarningFields | UserMessageFields | GeneratingFields | ToolsProgressFields
               | MemoryObservationFields | MemoryReflectionFields
               | PlanUpdatedFields | WarningFields | ErrorFields | RunQueuedFields | RunEndedFields
               | SessionForkedFields)
"""The fields of one event of any kind, as an emitter hands them over with the kind."""
