"""The durable state of one session, stored as one JSON document per session: written by
the router alone (services/router/core/), read by every service that reports on a session
(the transcripts service's `session.get` and `sessions.list`) through the readers below.

Persisted state carries a schema version (`schema`); a change that old readers cannot
read bumps it, and `SessionState.load` upgrades older documents (table in
docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field, model_validator
from pydantic_core import to_jsonable_python

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.query_replies import ForkedFromReply
from loopwire.shared.contract.run_state import RunConfig, RunState

STATE_SCHEMA = 2
_OUTBOX = {"outbox": True}  # a dict: pydantic takes it as it is, a set it converts first


class ForkedFrom(BaseModel):
    """Where a fork's history comes from (services/router/shell/fork.py)."""

    session_id: str
    """The source; empty once it was deleted (`source_gone`: a replica of the previous
    release still reads a string here)."""
    seq: int
    """The source's event the fork was asked at."""
    cut_seq: int
    """The source's last event the fork's history includes (inside a run, the last complete turn)."""
    source_gone: bool = False
    """The source was deleted (`session.delete`): the fork keeps its history, and names no source."""


class WaitingRun(BaseModel):
    """A run that waits for a slot of its tenant (tenant_quotas.py): everything its start
    needs, kept until it is admitted (it starts), refused or aborted."""

    run_id: str
    config: RunConfig
    messages: list[Message]
    sources: list[str] = Field(default_factory=list)
    """The `user.message` source of each message (`input`, `follow_up`, `steer`)."""
    plan: Any = None
    workspace: dict[str, Any] | None = None
    tools_known: list[str] | None = None
    """The run's tools the catalog held when it began (RunState.tools.known)."""
    ignored_fields: list[str] = Field(default_factory=list)
    unknown_tools: list[str] = Field(default_factory=list)
    position: int | None = None
    """Its place in the tenant's queue when `run.queued` announced it; None before."""


class RunTotals(BaseModel):
    """What a run spent in all, as its tenant's usage counts it (tenant_quotas.py)."""

    run_id: str
    tokens: int
    usd: float


class SessionState(BaseModel):
    schema_version: int = Field(default=STATE_SCHEMA, alias="schema")
    session_id: str
    status: Literal["idle", "queued", "running", "awaiting_approval"] = "idle"
    run: RunState | None = None
    last_config: RunConfig | None = None
    history_len: int = 0
    runs: int = 0
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    cost_unknown: bool = False
    """Some generation of the session had no known price: `session.get` reports `cost_usd` null."""
    queued: list[Message] = Field(default_factory=list)
    """Follow-up user messages waiting for the next outer boundary."""
    steering: list[Message] = Field(default_factory=list)
    """Steering messages: applied at the next boundary, before queued follow-ups."""
    plan: dict[str, Any] | None = None
    """The latest agentic_planned run's plan: `{"run_id", "steps", "phase", "verification"}`
    (kept after the run ends; `session.get` shows it)."""
    recent_inputs: list[str] = Field(default_factory=list)
    """Ids of the latest applied ingress inputs (`in:<stream seq>`): redeliveries are
    no-ops. Step results need no entry: one is applied only while its step is the pending
    one, and the latest input, whatever its kind, is `outbox_input`."""
    changed_ns: int = 0
    """When the session last moved: the router's clock (ns since the epoch) at its latest
    transition; a step result that comes too long after it is a stalled run's
    (services/router/core/decide.py). 0: unknown (a state older than the field)."""
    ingress_seq: int = 0
    """Stream sequence (LOOPWIRE_INGRESS) of the last ingress message applied to the session,
    refusals included: ingress is applied in stream order across router replicas
    (ingress_order.py), and a message at or below it was applied already. 0: none yet."""
    rebuilt: bool = False
    """Rebuilt from its transcript (rebuild.py), which keeps no ingress position: the
    session's ingress messages before the next one applied were applied already (their
    events are what it was rebuilt from), so that one's backlog is not read."""
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    """Effects of the latest transition; performed again when its input is redelivered
    (a crash between commit and publish loses nothing; every effect is idempotent)."""
    outbox_input: str | None = None
    # -- forks (schema 1, additive) --
    forked_from: ForkedFrom | None = None
    """A fork: the session and event it was forked from."""
    tool_recording: str | None = None
    """A fork with recorded tools (a replay): the session whose recorded tool results answer
    this one's tool calls, matched by name and input; no tool provider is called."""
    # -- tenant limits (schema 1, additive) --
    waiting: WaitingRun | None = None
    """The run waiting for a slot of its tenant while the status is `queued`."""
    ended_run: RunTotals | None = None
    """The totals of the session's last ended run, reported with its tenant's usage again
    until the next count: a count the end's crash lost is made by the next transition."""

    model_config = {"populate_by_name": True}

    @model_validator(mode="after")
    def _upgraded(self) -> SessionState:
        """An older document is upgraded as it loads (RunState moves schema 1's flat run
        fields into their parts): it is stored again as this schema."""
        self.schema_version = STATE_SCHEMA
        return self

    @classmethod
    def load(cls, raw: dict[str, Any] | None, session_id: str) -> SessionState:
        if raw is None:
            return cls(session_id=session_id)
        return cls.model_validate(raw)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def dump_json(self) -> bytes:
        """`dump()` as JSON bytes (what the shell commits and caches), the outbox last. The
        outbox is plain data (effects as dicts, envelopes as they went out): orjson writes
        it in a third of the time pydantic takes to walk its `Any` values, which was two
        fifths of a running session's dump; what orjson does not know (a model in an
        event's fields, a set) it writes as pydantic's JSON mode would."""
        head = self.__pydantic_serializer__.to_json(self, by_alias=True, exclude=_OUTBOX)
        outbox = orjson.dumps(self.outbox, default=to_jsonable_python, option=orjson.OPT_NON_STR_KEYS)
        return b"".join((head[:-1], b',"outbox":', outbox, b"}"))

    @property
    def profile(self) -> str | None:
        if self.run is not None:
            return self.run.config.profile
        return self.last_config.profile if self.last_config else None


DELETED = "deleted"
"""The field of a tombstone: a session being deleted (services/router/shell/erasure.py)
keeps its state document with `"deleted": true` until every other store has let it go,
so a delete cut short never leaves a session that looks alive; every reader takes it
for a session that does not exist."""


def is_deleted(raw: dict[str, Any] | None) -> bool:
    """Whether a stored state document is a deleted session's tombstone."""
    return raw is not None and raw.get(DELETED) is True


# -- readers: what the services that report on a session read of its state ----------------------

def stored_state(raw: dict[str, Any]) -> SessionState:
    """The state of a stored session (the document `SessionStore.load` returns)."""
    return SessionState.model_validate(raw)


def config_in_effect(st: SessionState) -> RunConfig | None:
    """The settings of the session's run, else of its last run (None: it never ran)."""
    return st.run.config if st.run is not None else st.last_config


def reported_usage(st: SessionState) -> dict[str, int]:
    """The session's tokens as `session.get` reports them: cached input counts as input,
    and the cache's share of it is said beside."""
    return {"input_tokens": st.usage.total_input(), "output_tokens": st.usage.output_tokens,
            **st.usage.cache_fields()}


def reported_cost(st: SessionState) -> float | None:
    """The session's cost in USD; None (unknown) when some generation's model had no known
    price (services/router/core/accounting.py)."""
    return None if st.cost_unknown else round(st.cost_usd, 8)


def current_run_id(st: SessionState) -> str | None:
    """The run the session runs, or waits to start for its tenant's slot (status `queued`)."""
    if st.run is not None:
        return st.run.run_id
    return st.waiting.run_id if st.waiting is not None else None


Activity = Literal["generating", "tools", "awaiting_approval", "queued", "waiting_for_model"]
"""What a run is doing now (`session.get.activity`). `waiting_for_model`: a generation held
back by the fleet's model limits, which a state records only once those limits hold
generations (protocol.md, "Model limits"); until then a generation is `generating` from
its request (context assembly included) to its result."""


def run_position(st: SessionState) -> tuple[str | None, Activity | None]:
    """(`phase`, `activity`) of `session.get`: the run's profile phase and what it does
    now; (None, None) when the session is idle. A run queued for its tenant's slot has no
    phase yet."""
    run = st.run
    if run is None:
        return (None, "queued") if st.waiting is not None else (None, None)
    phase = run.profile_phase or None
    if run.approvals.checkpoint is not None or run.awaiting == "approval":
        return phase, "awaiting_approval"
    if run.awaiting == "tools":
        return phase, "tools"
    if run.awaiting == "generate":
        return phase, "generating"
    return phase, None


def open_checkpoint_id(st: SessionState) -> str | None:
    """The id of the approval checkpoint the session's run is paused on."""
    return st.run.approvals.checkpoint.id if st.run is not None and st.run.approvals.checkpoint is not None else None


def forked_from_session(st: SessionState) -> str | None:
    """The session this one was forked from (None: not a fork, or its source was deleted)."""
    return (st.forked_from.session_id or None) if st.forked_from is not None else None


def forked_from_reply(st: SessionState) -> ForkedFromReply | None:
    """`forked_from` as `session.get` answers it: `{"session_id", "seq", "cut_seq"}`, with
    `session_id` null and `source_gone` once the source was deleted; None: not a fork."""
    if st.forked_from is None:
        return None
    source = st.forked_from
    reply = ForkedFromReply(session_id=source.session_id, seq=source.seq, cut_seq=source.cut_seq)
    if source.source_gone:
        reply["session_id"] = None
        reply["source_gone"] = True
    return reply
