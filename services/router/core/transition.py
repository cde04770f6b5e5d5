"""One transition of a session: the working copy the core changes, and the `Decision` it
ends with.

`decide` (decide.py) never changes the state it is given: the shell keeps committed states
in an LRU and hands them in again. A `Transition` starts from a copy of it that shares
everything the core only reads or replaces (strings, the run's config, the outbox, the
checkpoint) and copies what it changes in place: the lists and dicts of the session, of
its run and of the run's parts, and the tool counts of `RunState.tools.executed`, one
level deeper (a copy on write of the containers, not a deep copy: the history is not in
the state, and a deep copy costs as much as deciding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ExecuteTools
from loopwire.shared.contract.event_fields import ErrorFields
from loopwire.shared.contract.events import EventFields, user_message_fields
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.run_state import RUN_PARTS, RunState
from loopwire.shared.contract.session_state import SessionState

from .effects import Effect, EmitEvent, PublishWork, effect_from_dict
from .inputs import (
    AdmissionInput,
    BaseInput,
    CallFinishedInput,
    GenerationInput,
    MessageInput,
    StartInput,
    SteerInput,
    ToolsInput,
)
from .next_step import EventSpec
from .state import RECENT_INPUTS

__all__ = ["Count", "Decision", "Transition", "reject", "replay", "working_copy"]


@dataclass(frozen=True)
class Count:
    """Something the shell counts in metrics that no event shows by itself (the shell
    derives the rest from the events). Not stored: a replayed outbox counts nothing."""

    name: str
    """`turn`, `extra_usage`, `vacuous_retry`, `commitment_nudge`, `steer`."""
    labels: dict[str, str] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class Decision:
    state: SessionState | None
    """The next state; None when the input changes nothing (no commit)."""
    effects: list[Effect] = field(default_factory=list)
    append: list[Message] = field(default_factory=list)
    """Messages this transition adds to the session's history."""
    history_len_before: int = 0
    replay: bool = False
    """The input was applied before: perform the stored outbox again, commit nothing."""
    outbox_of_later_input: bool = False
    """A replay of the outbox of a later input, which applied this one as its backlog: that
    input's replica publishes its events, so of those only the ones not stored yet go out
    (another copy on core NATS would show subscribers a seq again)."""
    counts: list[Count] = field(default_factory=list)


_USER_SOURCES: dict[type, str] = {StartInput: "input", MessageInput: "follow_up", SteerInput: "steer"}

Model = TypeVar("Model", bound=BaseModel)


_CONTAINERS = (list, dict)
_SCALARS = (str, int, float, bool, bytes, type(None))
_MAY_HOLD: dict[type, tuple[str, ...]] = {}


def _may_hold_container(annotation: Any) -> bool:
    """Whether a field so annotated may hold a list or a dict: anything but a scalar, a
    literal, an enum or a model, or a union of those."""
    origin = get_origin(annotation)
    if origin is Literal or annotation in _SCALARS:
        return False
    if origin in (Union, UnionType):
        return any(_may_hold_container(arg) for arg in get_args(annotation))
    return not (isinstance(annotation, type) and issubclass(annotation, Enum | BaseModel))


def _fields_to_copy(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `cls` a working copy may have to copy (their value checked then)."""
    names = _MAY_HOLD.get(cls)
    if names is None:
        names = _MAY_HOLD[cls] = tuple(name for name, field in cls.model_fields.items()
                                       if _may_hold_container(field.annotation))
    return names


def _containers_copied(model: Model) -> Model:
    """A shallow copy of `model` whose list and dict fields are copies of their own.

    Built as pydantic's `model_copy()` builds one (a new instance with a copy of its
    `__dict__` and of its fields-set), with the containers copied in the same pass: the
    working copy of a state makes eight of these per decision, and `model_copy` costs
    twice as much for what it checks and copies again here. Only the fields whose type
    may hold a container are looked at (a third of a run's fields): half the time of
    looking at every value. The state's models have no extra fields and no private
    attributes (`__pydantic_extra__` and `__pydantic_private__` are None), which the copy
    keeps."""
    copy = object.__new__(type(model))
    # pydantic keeps the field values in the instance's __dict__: set there, a value skips
    # the assignment hook, which has nothing to check for a copy of the same value.
    values = model.__dict__.copy()
    for name in _fields_to_copy(type(model)):
        value = values[name]
        if type(value) in _CONTAINERS:
            values[name] = value.copy()
    _set(copy, "__dict__", values)
    _set(copy, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    _set(copy, "__pydantic_extra__", None)
    _set(copy, "__pydantic_private__", None)
    return copy


_set = object.__setattr__


def working_copy(state: SessionState) -> SessionState:
    """`state` as a transition may change it, leaving `state` itself as it was (see the
    module's docstring for what is shared and what is copied). For a run ten tool turns
    in: ~17 us, a fifth of a JSON round trip of the state."""
    copy = _containers_copied(state)
    if state.run is not None:
        run: RunState = _containers_copied(state.run)
        parts = vars(run)
        parts.update({name: _containers_copied(parts[name]) for name in RUN_PARTS})
        # tool_batches.record_batch counts in these entries in place
        vars(run.tools)["executed"] = [dict(entry) for entry in run.tools.executed]
        vars(copy)["run"] = run
    return copy


def _stored(effect: Effect) -> dict[str, Any]:
    """`effect.model_dump(mode="json")` (an event's fields as they are), the entry of the
    outbox that keeps it. A work's envelope is JSON already (made by the envelope's
    `model_dump(mode="json")`, or read back from a stored outbox): it is kept as it is
    instead of walked again, which was two thirds of the cost of dumping a generation's
    outbox. Nothing changes an effect's dicts or an outbox's after the decision that made
    them, so sharing the envelope with the effect is safe (consecutive states already
    share their outbox entries).
    Here rather than in effects.py: a call into another file per effect would lengthen
    the walk of a tool-turn (tests/tool_turn_walk.py)."""
    if type(effect) is PublishWork:
        # `target` inline, in the order of the effect's own dump.
        return {"type": effect.type, "envelope": effect.envelope, "msg_id": effect.msg_id,
                "target": "tools.execute" if type(effect.work) is ExecuteTools else "memory.assemble"}
    if type(effect) is EmitEvent:
        # Its fields as the core made them: the state's dump writes them as JSON mode
        # would (SessionState.dump_json), a third of the cost of walking them here.
        return {"type": effect.type, "kind": effect.kind, "key": effect.key, "run_id": effect.run_id,
                "fields": effect.fields}
    return effect.model_dump(mode="json")


class Transition:
    """The working copy of one transition: the next state, and the effects, history and
    counts it produces."""

    def __init__(self, state: SessionState, inp: BaseInput) -> None:
        self.st = working_copy(state)
        self.history_len_before = state.history_len
        self.inp = inp
        self.effects: list[Effect] = []
        self.append: list[Message] = []
        self.sources: dict[int, str] = {}
        """The `user.message` source of an appended message, where the input's is not it
        (follow-ups taken at the outer boundary of a step's result)."""
        self.counts: list[Count] = []
        self.quota_added: tuple[int, float] = (0, 0.0)
        """Tokens and USD this transition added to its tenant's usage (tenant_quotas.py)."""

    def emit(self, kind: str, key: str, run_id: str | None, fields: EventFields) -> None:
        self.effects.append(EmitEvent(kind=kind, key=key, run_id=run_id, fields=fields))

    def emit_spec(self, run: RunState, spec: EventSpec, key: str) -> None:
        """Emit an event a rule described (a `phase.changed` is keyed by the run's count of them)."""
        if spec.kind == "phase.changed":
            key = message_ids.event_key("phase.changed", run.run_id, run.phase_changes)
        self.emit(spec.kind, key, run.run_id, spec.fields)

    def count(self, name: str, labels: dict[str, str] | None = None, **values: float) -> None:
        self.counts.append(Count(name, labels or {}, values))

    def add_message(self, message: Message, source: str | None = None) -> None:
        if source is not None:
            self.sources[len(self.append)] = source
        self.append.append(message)
        self.st.history_len += 1

    def add_turn(self, message: Message | None, events: list[EmitEvent]) -> None:
        """A generation's turn in one step: its events, and its message in the history
        (None: the turn is dropped, or empty)."""
        self.effects.extend(events)
        if message is not None:
            self.add_message(message)

    def finish(self) -> Decision:
        st = self.st
        self._report_user_messages()
        if not isinstance(self.inp, GenerationInput | ToolsInput | CallFinishedInput | AdmissionInput):
            st.recent_inputs = (st.recent_inputs + [self.inp.input_id])[-RECENT_INPUTS:]
        st.ingress_seq = max(st.ingress_seq, self.inp.ingress_seq)
        st.outbox = [_stored(e) for e in self.effects] + self._work_in_flight()
        st.outbox_input = self.inp.input_id
        if self.inp.now_ns:
            st.changed_ns = self.inp.now_ns
        return Decision(state=st, effects=self.effects, append=self.append,
                        history_len_before=self.history_len_before, counts=self.counts)

    def _work_in_flight(self) -> list[dict[str, Any]]:
        """The work of the step still in flight, from the outbox this transition replaces,
        when this transition sends none of its own (a follow-up queued, an approval
        decided later): kept in the outbox, so that performing the outbox again (a
        redelivered input, after a crash that may have lost that work) still sends it."""
        run = self.st.run
        if run is None or run.pending_step is None or any(isinstance(e, PublishWork) for e in self.effects):
            return []
        return [e for e in self.st.outbox
                if e.get("type") == "work" and e.get("envelope", {}).get("step_id") == run.pending_step]

    def _model_wrote(self, message: Message) -> bool:
        """The model's own answer has its `message` event; everything else (including an
        assistant turn the user supplied in a list `input`) is reported here."""
        return isinstance(self.inp, GenerationInput) and message.get("role") == "assistant"

    def _report_user_messages(self) -> None:
        """A `user.message` event for every message this transition added that the model
        did not write, placed before any work goes out (and before run.ended), so the transcript alone holds the
        whole history (services/transcripts/rebuild.py)."""
        source = _USER_SOURCES.get(type(self.inp), "router")
        reported = {r.tool_use_id for r in self.inp.result.results} if isinstance(self.inp, ToolsInput) else set()
        turn = self.st.run.turn if self.st.run else 0
        events = [EmitEvent(kind="user.message", key=message_ids.event_key("user.message", self.inp.input_id, n),
                            run_id=self.st.run.run_id if self.st.run else None,
                            fields=user_message_fields(m, turn, source=self.sources.get(n, source), reported=reported))
                  for n, m in enumerate(self.append) if not self._model_wrote(m)]
        if not events:
            return
        at = next((k for k, e in enumerate(self.effects)
                   if not isinstance(e, EmitEvent) or e.kind == "run.ended"), len(self.effects))
        self.effects[at:at] = events


def replay(state: SessionState, *, of_later_input: bool = False) -> Decision:
    """The stored outbox of the session's last transition, to be performed again."""
    return Decision(state=None, effects=[effect_from_dict(e) for e in state.outbox], replay=True,
                    outbox_of_later_input=of_later_input)


def reject(state: SessionState, inp: BaseInput, code: str, *, message: str, limit: str | None = None,
           model: str | None = None) -> Decision:
    """An `error` event on the session and nothing else: no state is created or changed.
    `limit`: the tenant limit that refused a start; `model`: the unpriced model it named."""
    run_id = state.run.run_id if state.run else None
    fields = ErrorFields(code=code, message=message)
    if limit is not None:
        fields["limit"] = limit
    if model is not None:
        fields["model"] = model
    return Decision(state=None, effects=[EmitEvent(kind="error", key=message_ids.event_key("error", inp.input_id), run_id=run_id,
                                                   fields=fields)])
