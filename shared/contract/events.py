"""The egress events: the envelope every event carries, each kind's event as a TypedDict
(its envelope and its own fields, event_fields.py), and the pydantic models built from
those declarations for documentation (AsyncAPI, docs/asyncapi.json) and for a client that
validates what it receives (`validate_event`). Emitters build bodies with
`contract.make_event`; tests check that every emitted body validates against its model."""

import functools
import keyword
import operator
import sys
import types
from collections.abc import Iterable, Mapping
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo
from typing_extensions import ReadOnly, TypedDict, is_typeddict

# Relative: mypy, run over the folders, resolves a sibling module but not its `loopwire.` name.
from .event_fields import (
    UNDOCUMENTED,
    ApprovalDecidedFields,
    ApprovalRequestedFields,
    BudgetWarningFields,
    CompactionFields,
    ErrorFields,
    EventFields,
    EventUsage,
    GeneratingFields,
    LoopDetectedFields,
    MemoryNoteFields,
    MemoryObservationFields,
    MemoryReflectionFields,
    MessageFields,
    ModelFallbackFields,
    ModelThrottledFields,
    PhaseChangedFields,
    PlanUpdatedFields,
    RetractedFields,
    RunEndedFields,
    RunQueuedFields,
    RunStartedFields,
    SessionForkedFields,
    SteeringFields,
    TextDeltaFields,
    ToolCallFields,
    ToolResultFields,
    ToolsProgressFields,
    UserMessageFields,
    WarningFields,
)
from .messages import ContentBlock, Message

__all__ = ["AnyEvent", "EventEnvelope", "EventFields"]


class EventEnvelope(TypedDict):
    """What every event carries before its own fields, in this order on the wire."""

    v: Annotated[Literal[1], Field(default=1)]
    session_id: str
    run_id: Annotated[str | None, Field(default=None)]
    seq: Annotated[int, Field(ge=1, description="Per session, strictly increasing, never reused.")]
    # Read-only, so that each kind's event below can narrow it to its literal.
    kind: ReadOnly[str]
    ts: Annotated[str, Field(description="RFC 3339 time of emission.")]


# Each kind's event: `<Kind>Event`, or `<Kind>EventBody` where the model below already has
# the name `<Kind>Event` (MessageEvent, ToolCallEvent, ...).
class RunStartedEvent(EventEnvelope, RunStartedFields):
    kind: ReadOnly[Literal["run.started"]]


class PhaseChangedEvent(EventEnvelope, PhaseChangedFields):
    kind: ReadOnly[Literal["phase.changed"]]


class TextDeltaEvent(EventEnvelope, TextDeltaFields):
    kind: ReadOnly[Literal["text.delta"]]


class MessageEventBody(EventEnvelope, MessageFields):
    kind: ReadOnly[Literal["message"]]


class ToolCallEventBody(EventEnvelope, ToolCallFields):
    kind: ReadOnly[Literal["tool.call"]]


class ToolResultEventBody(EventEnvelope, ToolResultFields):
    kind: ReadOnly[Literal["tool.result"]]


class RetractedEvent(EventEnvelope, RetractedFields):
    kind: ReadOnly[Literal["retracted"]]


class ApprovalRequestedEvent(EventEnvelope, ApprovalRequestedFields):
    kind: ReadOnly[Literal["approval.requested"]]


class ApprovalDecidedEvent(EventEnvelope, ApprovalDecidedFields):
    kind: ReadOnly[Literal["approval.decided"]]


class LoopDetectedEvent(EventEnvelope, LoopDetectedFields):
    kind: ReadOnly[Literal["loop.detected"]]


class SteeringEvent(EventEnvelope, SteeringFields):
    kind: ReadOnly[Literal["steering"]]


class ModelFallbackEvent(EventEnvelope, ModelFallbackFields):
    kind: ReadOnly[Literal["model.fallback"]]


class ModelThrottledEvent(EventEnvelope, ModelThrottledFields):
    kind: ReadOnly[Literal["model.throttled"]]


class CompactionEvent(EventEnvelope, CompactionFields):
    kind: ReadOnly[Literal["compaction"]]


class BudgetWarningEvent(EventEnvelope, BudgetWarningFields):
    kind: ReadOnly[Literal["budget.warning"]]


class UserMessageEvent(EventEnvelope, UserMessageFields):
    kind: ReadOnly[Literal["user.message"]]


class GeneratingEvent(EventEnvelope, GeneratingFields):
    kind: ReadOnly[Literal["generating"]]


class ToolsProgressEvent(EventEnvelope, ToolsProgressFields):
    kind: ReadOnly[Literal["tools.progress"]]


class MemoryObservationEvent(EventEnvelope, MemoryObservationFields):
    kind: ReadOnly[Literal["memory.observation"]]


class MemoryReflectionEvent(EventEnvelope, MemoryReflectionFields):
    kind: ReadOnly[Literal["memory.reflection"]]


class PlanUpdatedEvent(EventEnvelope, PlanUpdatedFields):
    kind: ReadOnly[Literal["plan.updated"]]


class WarningEventBody(EventEnvelope, WarningFields):
    kind: ReadOnly[Literal["warning"]]


class ErrorEventBody(EventEnvelope, ErrorFields):
    kind: ReadOnly[Literal["error"]]


class RunQueuedEvent(EventEnvelope, RunQueuedFields):
    kind: ReadOnly[Literal["run.queued"]]


class RunEndedEvent(EventEnvelope, RunEndedFields):
    kind: ReadOnly[Literal["run.ended"]]


class SessionForkedEvent(EventEnvelope, SessionForkedFields):
    kind: ReadOnly[Literal["session.forked"]]


AnyEvent = (RunStartedEvent | PhaseChangedEvent | TextDeltaEvent | MessageEventBody | ToolCallEventBody
            | ToolResultEventBody | RetractedEvent | ApprovalRequestedEvent | ApprovalDecidedEvent
            | LoopDetectedEvent | SteeringEvent | ModelFallbackEvent | ModelThrottledEvent | CompactionEvent
            | BudgetWarningEvent | UserMessageEvent | GeneratingEvent | ToolsProgressEvent | MemoryObservationEvent
            | MemoryReflectionEvent | PlanUpdatedEvent | WarningEventBody | ErrorEventBody | RunQueuedEvent
            | RunEndedEvent | SessionForkedEvent)
"""An event of any kind as it is stored and goes out: a reader narrows it by `kind`
(`event["kind"] == "run.ended"`) to that kind's fields."""


# -- the models, built from the TypedDicts above ------------------------------------------------

class EventModel(BaseModel):
    """The base of the event models: what a body carries beyond its declared fields is
    kept (a newer emitter's additions)."""

    model_config = ConfigDict(extra="allow")


_NESTED: dict[Any, type[BaseModel]] = {}
_FIELDS_MODULE = EventUsage.__module__
_WRAPPERS = (NotRequired, Required, ReadOnly)


def _schema_type(tp: Any) -> Any:
    """`tp` with each TypedDict of the events' own in it replaced by its model (the nested
    shapes: usage, plan steps); a message or a block (messages.py) is documented as the
    JSON object it is."""
    if is_typeddict(tp) and tp.__module__ != _FIELDS_MODULE:
        return dict[str, Any]
    if is_typeddict(tp):
        if tp not in _NESTED:
            _NESTED[tp] = create_model(tp.__name__, __module__=__name__, **_fields(tp))
        return _NESTED[tp]
    origin, args = get_origin(tp), get_args(tp)
    if not args or origin is Literal:
        return tp
    mapped = tuple(_schema_type(a) for a in args)
    if origin in (Union, types.UnionType):
        return functools.reduce(operator.or_, mapped)
    return origin[mapped]


def _admits_none(tp: Any) -> bool:
    return tp is Any or tp is type(None) or (
        get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp))


def _fields(td: Any) -> dict[str, Any]:
    """The model fields of a TypedDict's keys, in their order. A `Field` in a key's
    `Annotated` keeps its description, constraints and default; a NotRequired key is a
    nullable field with default null (absent on the wire, null to a model); a keyword
    key (`from`) a field under another name with the key as its alias."""
    hints = get_type_hints(td, globalns=vars(sys.modules[td.__module__]), include_extras=True)
    out: dict[str, Any] = {}
    for key, hint in hints.items():
        tp = hint
        while get_origin(tp) in _WRAPPERS:
            tp = get_args(tp)[0]
        meta: tuple[Any, ...] = ()
        if get_origin(tp) is Annotated:
            tp, meta = get_args(tp)[0], tp.__metadata__
        if UNDOCUMENTED in meta:
            continue
        tp = _schema_type(tp)
        default: Any = ...
        info = next((m for m in meta if isinstance(m, FieldInfo)), None)
        if info is not None and not info.is_required():
            default = info.default
        elif key not in td.__required_keys__:
            tp, default = (tp if _admits_none(tp) else tp | None), None
        if keyword.iskeyword(key):
            meta = (*meta, Field(alias=key))
        out[key + "_" if keyword.iskeyword(key) else key] = (Annotated[(tp, *meta)] if meta else tp, default)
    return out


def _model(name: str, kind: str, td: Any) -> type[EventModel]:
    """The model of one kind's event: the envelope, `kind` fixed, the kind's fields; its
    description the fields' docstring."""
    doc = td.__dict__.get("__doc__")
    return create_model(name, __base__=Event, __doc__=doc, __module__=__name__,
                        **{"kind": (Literal[kind], kind), **_fields(td)})


if TYPE_CHECKING:
    # To a type checker each model is a class of its own name; pydantic builds its fields
    # from the TypedDicts (below), so their types are the TypedDicts' to mypy, not attributes.
    class Event(EventModel): ...
    class RunStarted(Event): ...
    class PhaseChanged(Event): ...
    class TextDelta(Event): ...
    class MessageEvent(Event): ...
    class ToolCallEvent(Event): ...
    class ToolResultEvent(Event): ...
    class Retracted(Event): ...
    class ApprovalRequested(Event): ...
    class ApprovalDecided(Event): ...
    class LoopDetected(Event): ...
    class Steering(Event): ...
    class ModelFallback(Event): ...
    class ModelThrottled(Event): ...
    class Compaction(Event): ...
    class BudgetWarning(Event): ...
    class UserMessage(Event): ...
    class Generating(Event): ...
    class ToolsProgress(Event): ...
    class MemoryObservation(Event): ...
    class MemoryReflection(Event): ...
    class PlanUpdated(Event): ...
    class WarningEvent(Event): ...
    class ErrorEvent(Event): ...
    class RunQueued(Event): ...
    class RunEnded(Event): ...
    class SessionForked(Event): ...
else:
    Event = create_model("Event", __base__=EventModel, __module__=__name__, **_fields(EventEnvelope))
    """The model of an event of a kind it does not know: the envelope."""

    RunStarted = _model("RunStarted", "run.started", RunStartedFields)
    PhaseChanged = _model("PhaseChanged", "phase.changed", PhaseChangedFields)
    TextDelta = _model("TextDelta", "text.delta", TextDeltaFields)
    MessageEvent = _model("MessageEvent", "message", MessageFields)
    ToolCallEvent = _model("ToolCallEvent", "tool.call", ToolCallFields)
    ToolResultEvent = _model("ToolResultEvent", "tool.result", ToolResultFields)
    Retracted = _model("Retracted", "retracted", RetractedFields)
    ApprovalRequested = _model("ApprovalRequested", "approval.requested", ApprovalRequestedFields)
    ApprovalDecided = _model("ApprovalDecided", "approval.decided", ApprovalDecidedFields)
    LoopDetected = _model("LoopDetected", "loop.detected", LoopDetectedFields)
    Steering = _model("Steering", "steering", SteeringFields)
    ModelFallback = _model("ModelFallback", "model.fallback", ModelFallbackFields)
    ModelThrottled = _model("ModelThrottled", "model.throttled", ModelThrottledFields)
    Compaction = _model("Compaction", "compaction", CompactionFields)
    BudgetWarning = _model("BudgetWarning", "budget.warning", BudgetWarningFields)
    UserMessage = _model("UserMessage", "user.message", UserMessageFields)
    Generating = _model("Generating", "generating", GeneratingFields)
    ToolsProgress = _model("ToolsProgress", "tools.progress", ToolsProgressFields)
    MemoryObservation = _model("MemoryObservation", "memory.observation", MemoryNoteFields)
    MemoryReflection = _model("MemoryReflection", "memory.reflection", MemoryNoteFields)
    PlanUpdated = _model("PlanUpdated", "plan.updated", PlanUpdatedFields)
    WarningEvent = _model("WarningEvent", "warning", WarningFields)
    ErrorEvent = _model("ErrorEvent", "error", ErrorFields)
    RunQueued = _model("RunQueued", "run.queued", RunQueuedFields)
    RunEnded = _model("RunEnded", "run.ended", RunEndedFields)
    SessionForked = _model("SessionForked", "session.forked", SessionForkedFields)


EVENT_MODELS: dict[str, type[Event]] = {
    m.model_fields["kind"].default: m
    for m in (RunStarted, PhaseChanged, TextDelta, MessageEvent, ToolCallEvent, ToolResultEvent, Retracted,
              ApprovalRequested, ApprovalDecided, LoopDetected, Steering, ModelFallback, Compaction, ErrorEvent,
              WarningEvent, RunEnded, BudgetWarning, UserMessage, MemoryObservation, MemoryReflection, PlanUpdated,
              Generating, ToolsProgress, SessionForked, RunQueued, ModelThrottled)
}


def validate_event(body: Mapping[str, object]) -> Event:
    """Validate an emitted body against its kind's model (unknown kinds: the common fields)."""
    kind = body.get("kind")
    model = EVENT_MODELS.get(kind, Event) if isinstance(kind, str) else Event
    return model.model_validate(body)


def user_message_fields(message: Message, turn: int, source: str,
                        *, reported: Iterable[str] = ()) -> UserMessageFields:
    """The fields of the `user.message` event the router emits for a message it appends
    (`source`: `input`, `follow_up`, `steer`, `router`). A tool_result block whose result
    is in a `tool.result` event already (`reported` tool_use ids) goes without its content:
    the transcript holds each result once."""
    skip = set(reported)
    content = message["content"]
    if isinstance(content, list) and skip:
        content = [_without_content(b)
                   if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in skip else b
                   for b in content]
    return {"turn": turn, "message": {"role": message.get("role", "user"), "content": content}, "source": source}


def _without_content(block: ContentBlock) -> ContentBlock:
    out = block.copy()
    out.pop("content", None)
    return out
