"""The egress events as typed models: documentation (AsyncAPI, docs/asyncapi.json) and a
schema a client can validate against. Emitters build bodies with `contract.make_event`;
tests check that every emitted body validates against its model here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from loopwire.shared.contract.messages import Message


class Event(BaseModel):
    model_config = ConfigDict(extra="allow")

    v: Literal[1] = 1
    session_id: str
    run_id: str | None = None
    seq: int = Field(ge=1, description="Per session, strictly increasing, never reused.")
    kind: str
    ts: str = Field(description="RFC 3339 time of emission.")


class EventUsage(BaseModel):
    input_tokens: int
    """All input, read from or written to the prompt cache included."""
    output_tokens: int
    cache_read_input_tokens: int | None = Field(default=None, description=(
        "Addition: the part of `input_tokens` read from the prompt cache."))
    cache_creation_input_tokens: int | None = Field(default=None, description=(
        "Addition: the part of `input_tokens` written to the prompt cache."))


class RunStarted(Event):
    kind: Literal["run.started"] = "run.started"
    profile: str
    ignored_fields: list[str] | None = Field(default=None, description=(
        "Addition: StartRun fields the request carried that loopwire does not know and ignored "
        "(`tool_permission`, `limits.max_turn`); absent when there were none."))
    config: dict[str, Any] | None = Field(default=None, description=(
        "Addition: what the run was started with as loopwire resolved it (profile, system, models, max_tokens, "
        "temperature, tools, tool_permissions, limits, strategy, metadata): a rebuilt session's next run "
        "starts with it."))


class PhaseChanged(Event):
    kind: Literal["phase.changed"] = "phase.changed"
    from_: str = Field(alias="from")
    to: str


class TextDelta(Event):
    kind: Literal["text.delta"] = "text.delta"
    turn: int
    text: str


class MessageEvent(Event):
    kind: Literal["message"] = "message"
    turn: int
    message: dict[str, Any] = Field(description='{"role": "assistant", "content": [blocks]}')
    model: str | None
    stop_reason: str | None
    usage: EventUsage
    source: Literal["executor"] | None = Field(
        default=None, description="Addition: `executor` for a model call of an external agent that used tools.")


class ToolCallEvent(Event):
    kind: Literal["tool.call"] = "tool.call"
    turn: int
    tool_use_id: str
    name: str
    input: dict[str, Any]
    source: Literal["executor"] | None = Field(
        default=None, description="Addition: `executor` for an external agent's own tool (profiles claude_code, ...).")


class ToolResultEvent(Event):
    kind: Literal["tool.result"] = "tool.result"
    turn: int
    tool_use_id: str
    name: str
    is_error: bool
    content: str | list[dict[str, Any]]
    source: Literal["executor"] | None = Field(
        default=None, description="Addition: `executor` for an external agent's own tool (profiles claude_code, ...).")
    recorded: bool | None = Field(default=None, description=(
        "Addition: true when the result came from the recording of a fork's source (a replay with "
        "recorded tools): no tool ran."))


class Retracted(Event):
    kind: Literal["retracted"] = "retracted"
    turn: int
    reason: str


class ApprovalRequested(Event):
    kind: Literal["approval.requested"] = "approval.requested"
    checkpoint_id: str
    tool_calls: list[dict[str, Any]] | None = Field(
        default=None, description='The calls the decision is about: [{"tool_use_id", "name", "input"}].')
    proposal: Any = Field(default=None, description="turn_by_turn: the reply's text, when it calls no tool.")
    turn: int | None = Field(default=None, description="Addition: the turn that asked.")
    source: Literal["executor"] | None = Field(
        default=None, description="Addition: an external agent asks before running a tool; it waits in its turn.")


class ApprovalDecided(Event):
    """Addition: the `decision` that answered a checkpoint was applied, so the transcript
    holds every human decision, and shows that a run no longer waits on it."""

    kind: Literal["approval.decided"] = "approval.decided"
    checkpoint_id: str
    decision: Literal["approve", "deny"]
    note: str | None = None


class LoopDetected(Event):
    kind: Literal["loop.detected"] = "loop.detected"
    detection: str
    escalation: Literal["redirect", "switch_model", "terminate"]
    occurrences: int | None = Field(default=None, description=(
        "Addition: how many times the pattern occurred in a row (turns with the same call or answer, "
        "repetitions of the cycle)."))
    to_model: str | None = Field(default=None, description="Addition: the fallback model the switch rung chose.")
    temperature: float | None = Field(default=None, description=(
        "Addition: the raised temperature of a switch rung without a fallback model."))


class Steering(Event):
    """The loop changed course (shared/protocol.md, "Phases, answers and progress"): where
    it took one of the paths that steer a run, named by `source`."""

    kind: Literal["steering"] = "steering"
    source: Literal["priority_queue", "follow_up_queue", "loop_redirect", "model_switch", "retry_reduced_context"] = \
        Field(description=("`priority_queue`: a steer applied; `follow_up_queue`: queued messages taken at the outer "
                           "boundary; `loop_redirect`: the loop ladder's redirect; `model_switch`: the run's next "
                           "model (or, without one, a raised temperature); `retry_reduced_context`: the generation "
                           "asked again with a reduced context."))
    turn: int | None = Field(default=None, description="Addition: the run's completed generations at that point.")
    reason: str | None = Field(default=None, description=(
        "Addition: why: the loop detection, or the error code of the failed generation."))
    messages: int | None = Field(default=None, description="Addition: `follow_up_queue`: how many queued messages "
                                                           "were taken.")
    to_model: str | None = Field(default=None, description="Addition: `model_switch`: the model the run goes on with.")
    temperature: float | None = Field(default=None, description=(
        "Addition: `model_switch` without a fallback model: the raised temperature."))
    interrupted: Literal["generation", "tools", "approval"] | None = Field(default=None, description=(
        "Addition: `priority_queue`: what the steer cut short: the generation in flight (dropped, `retracted`), "
        "the tool calls executing (cancelled, each answered \"cancelled by steering\"), or the open approval "
        "checkpoint (withdrawn); absent when the run was between steps."))


class ModelFallback(Event):
    kind: Literal["model.fallback"] = "model.fallback"
    from_model: str
    to_model: str
    reason: str


class ModelThrottled(Event):
    """Addition: a generation waits for the model limits (LOOPWIRE_MODEL_LIMITS) before its
    `generating`; waiting is neither an error nor a reason for a fallback."""

    kind: Literal["model.throttled"] = "model.throttled"
    turn: int
    model: str
    reason: Literal["rpm", "input_tpm", "output_tpm", "concurrency", "cooldown"]
    wait_s: float = Field(description="The expected wait in seconds (0: until a request in flight ends).")


class Compaction(Event):
    kind: Literal["compaction"] = "compaction"
    tokens_before: int
    tokens_after: int
    method: str | None = Field(default=None, description=(
        "Addition: summary or drop; for an external agent agent_manual or agent_auto (its own compaction), "
        "fresh_session (a new agent session told a trimmed transcript)."))
    messages_compacted: int | None = Field(default=None, description="Addition: history messages it covers.")


class BudgetWarning(Event):
    """Addition: a run crossed LOOPWIRE_BUDGET_WARNING_PCT of one of its limits."""

    kind: Literal["budget.warning"] = "budget.warning"
    limit: Literal["max_total_tokens", "max_cost_usd"]
    used: float
    max: float
    pct: float


class UserMessage(Event):
    """Addition: a message the router added to the history that the model did not write
    (the user's input, a follow-up, a steer, a redirect, tool results), so the transcript
    alone can rebuild the session (services/router/shell/rebuild.py)."""

    kind: Literal["user.message"] = "user.message"
    turn: int
    message: dict[str, Any]
    source: str = Field(description="input, follow_up, steer or router")


class Generating(Event):
    """Addition: a generation has started (again after a model fallback), so a UI can show
    that the model is working before its first text. Not kept in the transcript."""

    kind: Literal["generating"] = "generating"
    turn: int
    model: str = Field(description="The model asked.")


class ToolsProgress(Event):
    """Addition: one more of the calls of a turn has finished (after its `tool.result`).
    Not kept in the transcript."""

    kind: Literal["tools.progress"] = "tools.progress"
    turn: int
    total: int = Field(ge=1, description="The calls of this turn the tools service runs.")
    completed: int = Field(ge=1, description="How many of them have finished.")


class MemoryNote(Event):
    """Addition: an observation or reflection of the memory service."""

    kind: Literal["memory.observation", "memory.reflection"]


class PlanStep(BaseModel):
    step: str
    status: Literal["pending", "in_progress", "completed"]


class PlanUpdated(Event):
    """Addition: an agentic_planned run's plan was recorded or changed (docs/profiles.md)."""

    kind: Literal["plan.updated"] = "plan.updated"
    steps: list[PlanStep]
    source: Literal["start", "model", "text", "fallback", "verification", "executor"] = Field(
        description="Where this version came from: StartRun `plan`, an update_plan call, the model's text, "
                    "the task itself (no plan given), the verify phase (with `verification`), or an external "
                    "agent's own plan (profile acp).")
    phase: str = Field(description="The run's profile phase after the update.")
    verification: str | None = None


class WarningEvent(Event):
    """Addition: something the user should know that does not stop the run: `unknown_price`
    (a model with no known price: `run.ended.cost_usd` is null), `unknown_tools` (the run
    named tools nobody serves), `tenant_unpriced` (such a model's cost is not counted
    against its tenant's `usd_per_day`, only its tokens)."""

    kind: Literal["warning"] = "warning"
    code: str
    message: str


class ErrorEvent(Event):
    kind: Literal["error"] = "error"
    code: str
    message: str
    limit: str | None = Field(default=None, description=(
        "Addition: for `quota_exceeded`, the tenant limit that refused the start (`max_queued`, "
        "`tokens_per_day`, `usd_per_day`)."))


class RunQueued(Event):
    """Addition: the run waits for a slot of its tenant (LOOPWIRE_TENANT_LIMITS `max_running`);
    `run.started` follows when it gets one, or `run.ended` (`aborted`) when it is aborted first."""

    kind: Literal["run.queued"] = "run.queued"
    position: int = Field(ge=1, description="Its place in its tenant's queue (1: next to start).")


class RunEnded(Event):
    kind: Literal["run.ended"] = "run.ended"
    status: Literal["completed", "aborted", "budget_exhausted", "max_turns", "loop_terminated", "failed"]
    final_text: str
    conclusion: Any = Field(default=None, description=(
        "The finish tool's normalised input (docs/profiles.md): summary, confidence, classification, "
        "findings (raise/clear), outputs (output proposals); else, for a run that ends max_turns, "
        "budget_exhausted or loop_terminated, and for a text answer where a strategy asks for a conclusion, "
        "the technical summary {summary, ...} with `executed` [{tool, calls, ok, error}] (loopwire's addition, docs/protocol.md)."))
    turns: int
    usage: EventUsage
    cost_usd: float | None = Field(description=(
        "Addition: null when a model of the run has no known price (a `warning` event said so)."))
    reason: str | None = Field(default=None, description="Addition: why the run did not simply complete.")
    message_count: int | None = Field(default=None, description=(
        "The messages in the session's history after the run (2026-12-02)."))


class SessionForked(Event):
    """The first event of a fork (`<prefix>.api.session.fork`): its history is its
    source's as it stood at `from_seq` (inside a run: at the last complete turn, `cut_seq`)."""

    kind: Literal["session.forked"] = "session.forked"
    from_session_id: str
    from_seq: int = Field(description="The source's event the fork was asked at.")
    cut_seq: int | None = Field(default=None, description=(
        "Addition: the source's last event the fork's history includes (0: none of the source's own)."))
    messages: int | None = Field(default=None, description="Addition: the history messages the fork starts with.")
    config: dict[str, Any] | None = Field(default=None, description=(
        "Addition: the run settings the fork keeps (those of the run `from_seq` belongs to), as on run.started."))
    tools: Literal["live", "recorded"] | None = Field(default=None, description=(
        "Addition: `recorded`: the fork's tool calls are answered from the source's recorded results."))


class MemoryObservation(MemoryNote):
    kind: Literal["memory.observation"] = "memory.observation"


class MemoryReflection(MemoryNote):
    kind: Literal["memory.reflection"] = "memory.reflection"


EVENT_MODELS: dict[str, type[Event]] = {
    m.model_fields["kind"].default: m
    for m in (RunStarted, PhaseChanged, TextDelta, MessageEvent, ToolCallEvent, ToolResultEvent, Retracted,
              ApprovalRequested, ApprovalDecided, LoopDetected, Steering, ModelFallback, Compaction, ErrorEvent, WarningEvent,
              RunEnded, BudgetWarning, UserMessage, MemoryObservation, MemoryReflection, PlanUpdated, Generating,
              ToolsProgress, SessionForked, RunQueued, ModelThrottled)
}


def validate_event(body: dict[str, Any]) -> Event:
    """Validate an emitted body against its kind's model (unknown kinds: the common fields)."""
    model = EVENT_MODELS.get(body.get("kind", ""), Event)
    return model.model_validate(body)


def user_message_fields(message: Message, turn: int, source: str,
                        *, reported: Iterable[str] = ()) -> dict[str, Any]:
    """The fields of the `user.message` event the router emits for a message it appends
    (`source`: `input`, `follow_up`, `steer`, `router`). A tool_result block whose result
    is in a `tool.result` event already (`reported` tool_use ids) goes without its content:
    the transcript holds each result once."""
    skip = set(reported)
    content: object = message.get("content")
    if isinstance(content, list) and skip:
        content = [{k: v for k, v in b.items() if k != "content"}
                   if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in skip else b
                   for b in content]
    return {"turn": turn, "message": {"role": message.get("role", "user"), "content": content}, "source": source}
