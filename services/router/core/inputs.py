"""What the router's core reacts to: one model per input, decoded by the shell.

Every input carries `input_id` (the redelivery key: `in:<ingress stream seq>` or the
step id of a result), `new_id` (a fresh id the shell drew, so the core itself stays
deterministic) and `now` is not needed: events are stamped when they are emitted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from loopwire.shared.contract.envelopes import (
    ExecutorPermission,
    GenerationResult,
    ToolCallFinished,
    ToolsResult,
)
from loopwire.shared.contract.protocol import Abort, ApprovalDecision, FollowUp, StartRun


class BaseInput(BaseModel):
    input_id: str
    new_id: str = ""
    new_trace: dict[str, str] = Field(default_factory=dict)
    """A fresh traceparent the shell drew, used if this input starts a run."""
    now_ns: int = 0
    """When the shell received the input (the core reads no clock)."""
    ingress_seq: int = 0
    """An ingress input: its stream sequence in LOOPWIRE_INGRESS (0 for step results)."""
    backlog: bool = False
    """An ingress input read from the stream by a replica that is applying a later input of
    the session (ingress_order.py), not delivered to it: when it was applied already, the
    replica it was delivered to performs its effects (it holds it unacked until then)."""
    tenant_today: tuple[int, float] | None = None
    """The tenant's usage of the UTC day (tokens, USD) as the shell read it, for an input
    that may start a run or counts usage while the tenant has a daily allowance."""
    recover: bool = False
    """The input comes from a redelivered chain root (shared/runtime/chain.py): if the session
    moved past it, its current outbox is performed again, since the crash that caused
    the redelivery may have lost the work that outbox started."""
    catalog_tools: list[str] | None = None
    """An ingress input that may start a run: the names the tool catalog holds (looked up
    by the shell; None when it was not read), for the run's `tools_active`."""


class StartInput(BaseInput):
    kind: Literal["start"] = "start"
    body: StartRun
    # What the shell looked up for this start (I/O), passed in as data:
    strategy: dict[str, Any] | None = None
    """The strategy config resolved for `body.strategy` (strategy.py), dumped."""
    workspace: dict[str, Any] | None = None
    """agentic_planned: the WorkspaceSnapshot of `metadata.workspace` (workspace.py)."""
    parent_session_id: str | None = None
    """A child run: its parent session, from the metadata or the forwarded call header
    (subagent.parent_of, read by the shell)."""
    parent_depth: int | None = None
    """A child run: the subagent depth of the parent session's run, when it is known."""
    ignored_fields: list[str] = Field(default_factory=list)
    """StartRun fields the body carried that loopwire does not know (a typo such as
    `tool_permission`): named in `run.started` so the client sees them."""
    unknown_tools: list[str] = Field(default_factory=list)
    """Names in StartRun `tools` that the tool catalog does not hold at the start: a
    `warning` event lists them (the run goes on with the others)."""
    workspace_refusal: str | None = None
    """Why `metadata.workspace` may not be used (outside LOOPWIRE_WORKSPACE_ROOTS, ...):
    the start is refused with `workspace_not_allowed` (workspace.py)."""
    workspace_path: str | None = None
    """`metadata.workspace` resolved under the roots (an external agent works in it)."""


class MessageInput(BaseInput):
    kind: Literal["message"] = "message"
    body: FollowUp


class SteerInput(BaseInput):
    kind: Literal["steer"] = "steer"
    body: FollowUp


class AbortInput(BaseInput):
    kind: Literal["abort"] = "abort"
    body: Abort


class DecisionInput(BaseInput):
    kind: Literal["decision"] = "decision"
    body: ApprovalDecision


class GenerationInput(BaseInput):
    kind: Literal["generation"] = "generation"
    result: GenerationResult
    tool_schemas: dict[str, dict[str, Any]] | None = None
    """Input schemas of the tools the result calls (from the tools catalog, read by the
    shell): the plan gate validates the calls against them. None: not checked here."""


class ToolsInput(BaseInput):
    kind: Literal["tools"] = "tools"
    result: ToolsResult


class CallFinishedInput(BaseInput):
    """One call of a batch of several finished, before the batch's result (call_reports.py)."""

    kind: Literal["call_finished"] = "call_finished"
    report: ToolCallFinished


class PermissionInput(BaseInput):
    """An external agent's permission request, from its running step (executor_profiles.py)."""

    kind: Literal["permission"] = "permission"
    request: ExecutorPermission


class RejectedInput(BaseInput):
    """Ingress that could not be decoded: it becomes an `error` event and nothing else."""

    kind: Literal["rejected"] = "rejected"
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class UndeliverableInput(BaseInput):
    """Work of a run that will not be delivered again (a dead letter: shared/runtime/dead_letters.py),
    or a run whose step made no progress for longer than the outage tolerance (the
    router's watchdog): the run ends `failed` with an `error` event `undeliverable`."""

    kind: Literal["undeliverable"] = "undeliverable"
    run_id: str | None = None
    """The run the work belongs to; None: no run (an ingress message), only the error."""
    step_id: str | None = None
    """When set, only a run still waiting for this step is ended (the watchdog's check
    that nothing moved since it looked)."""
    what: str = ""
    """What was given up (a work subject, `ingress <verb>`, `step <id>`), for the message."""
    reason: str = ""


class AdmissionInput(BaseInput):
    """The tenant's answer for a run that waits for a slot (tenant_quotas.py): `granted`
    (it starts now), `queued` (at `position`), `refused` (the queue is full)."""

    kind: Literal["admission"] = "admission"
    run_id: str
    verdict: Literal["granted", "queued", "refused"]
    position: int = 0


RouterInput = Annotated[
    StartInput | MessageInput | SteerInput | AbortInput | DecisionInput | GenerationInput
    | ToolsInput | CallFinishedInput | RejectedInput | UndeliverableInput | PermissionInput | AdmissionInput,
    Field(discriminator="kind"),
]
