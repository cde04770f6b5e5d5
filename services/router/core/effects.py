"""What the core asks the shell to do. Effects are data: stored in the session's outbox
with the state that produced them and performed after the commit, so a crash between the
two is repaired by performing the outbox again. Every effect is idempotent (events by
dedup key, work by Nats-Msg-Id, notices because acting on one twice is harmless)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, GetPydanticSchema, computed_field

from loopwire.shared.contract.envelopes import AssembleContext, ExecuteTools
from loopwire.shared.contract.events import EventFields

StoredFields = Annotated[EventFields, GetPydanticSchema(lambda _tp, handler: handler(dict[str, Any]))]
"""An event's fields in an effect: their declared shape to mypy; to pydantic the JSON
object they are (validated and dumped as a dict, every key kept as the core wrote it)."""


class EmitEvent(BaseModel):
    type: Literal["emit"] = "emit"
    kind: str
    key: str
    """Dedup key: the same key is emitted once per session."""
    run_id: str | None = None
    fields: StoredFields


class PublishWork(BaseModel):
    """Work the router sends on: its envelope, which the dispatcher routes by its type
    (shared/runtime/dispatcher.py), and that envelope's JSON as the outbox keeps it."""

    type: Literal["work"] = "work"
    work: AssembleContext | ExecuteTools = Field(exclude=True, repr=False)
    """The envelope as the validated model the core built it from (read back from a stored
    outbox: validated from `envelope`, effect_from_dict)."""
    envelope: dict[str, Any]
    """Its JSON, made once by the core and stored in the outbox as it is (transition.py)."""
    msg_id: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def target(self) -> Literal["memory.assemble", "tools.execute"]:
        """The work's name in the stored outbox and in metrics."""
        return "tools.execute" if type(self.work) is ExecuteTools else "memory.assemble"


class PublishNotice(BaseModel):
    """A best-effort core NATS notice to the services doing the session's work.

    `cancel` goes to `<prefix>.ctl.<sid>.cancel` with `{"run_id": ...}`: the llm service
    stops the run's in-flight generation, the tools service its in-flight calls (steer,
    abort). Their late results arrive as stale step results and are ignored.

    `permission` goes to `<prefix>.ctl.<sid>.permission` with `{"run_id", "checkpoint_id",
    "decision", "note"}`: an external agent waiting in its step gets the decision
    (executor_profiles.py; the llm service asks again until it has one, so a lost notice
    only delays it)."""

    type: Literal["notice"] = "notice"
    notice: Literal["cancel", "permission"] = "cancel"
    body: dict[str, Any] = Field(default_factory=dict)


class TenantSlot(BaseModel):
    """The session's runs that leave their tenant's slots or queue (`release`: ended,
    aborted, refused) and the run that asks for a slot (`acquire`: it waits), settled in
    one call on the tenant's keys after the commit (tenant_quotas.py). Idempotent by run id."""

    type: Literal["slot"] = "slot"
    release: list[str] = Field(default_factory=list)
    acquire: str | None = None


class CountTenantUsage(BaseModel):
    """The session's runs' totals (run id, tokens, USD), added to their tenant's usage of
    `day` where they exceed what was counted of them (idempotent)."""

    type: Literal["usage"] = "usage"
    day: str
    totals: list[tuple[str, int, float]]


Effect = EmitEvent | PublishWork | PublishNotice | TenantSlot | CountTenantUsage

_BY_TYPE: dict[str, type[BaseModel]] = {"work": PublishWork, "notice": PublishNotice, "slot": TenantSlot,
                                        "usage": CountTenantUsage}


def effect_from_dict(raw: dict[str, Any]) -> Effect:
    """An effect read back from a stored outbox; work's envelope model is rebuilt from its JSON."""
    if raw.get("type") == "work":
        kind = ExecuteTools if raw.get("target") == "tools.execute" else AssembleContext
        return PublishWork(work=kind.model_validate(raw["envelope"]), envelope=raw["envelope"], msg_id=raw["msg_id"])
    return _BY_TYPE.get(raw.get("type", ""), EmitEvent).model_validate(raw)  # type: ignore[return-value]
