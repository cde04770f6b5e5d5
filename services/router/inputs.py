"""What the router's core reacts to: one model per input, decoded by the shell.

Every input carries `input_id` (the redelivery key: `in:<ingress stream seq>` or the
step id of a result), `new_id` (a fresh id the shell drew, so the core itself stays
deterministic) and `now` is not needed: events are stamped when they are emitted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from loopwire.shared.contract import Abort, Decision, FollowUp, StartRun
from loopwire.shared.envelopes import GenerationResult, ToolsResult


class _Input(BaseModel):
    input_id: str
    new_id: str = ""
    new_trace: dict[str, str] = Field(default_factory=dict)
    """A fresh traceparent the shell drew, used if this input starts a run."""
    now_ns: int = 0
    """When the shell received the input (the core reads no clock)."""


class StartInput(_Input):
    kind: Literal["start"] = "start"
    body: StartRun


class MessageInput(_Input):
    kind: Literal["message"] = "message"
    body: FollowUp


class SteerInput(_Input):
    kind: Literal["steer"] = "steer"
    body: FollowUp


class AbortInput(_Input):
    kind: Literal["abort"] = "abort"
    body: Abort


class DecisionInput(_Input):
    kind: Literal["decision"] = "decision"
    body: Decision


class GenerationInput(_Input):
    kind: Literal["generation"] = "generation"
    result: GenerationResult


class ToolsInput(_Input):
    kind: Literal["tools"] = "tools"
    result: ToolsResult


class RejectedInput(_Input):
    """Ingress that could not be decoded: it becomes an `error` event and nothing else."""

    kind: Literal["rejected"] = "rejected"
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


RouterInput = Annotated[
    StartInput | MessageInput | SteerInput | AbortInput | DecisionInput | GenerationInput
    | ToolsInput | RejectedInput,
    Field(discriminator="kind"),
]
