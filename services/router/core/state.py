"""The router's durable state of one session, stored as one JSON document per session.

Persisted state carries a schema version (`schema`); a change that old readers cannot
read bumps it, and `SessionState.load` upgrades older documents (table in
docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from loopwire.shared.contract.envelopes import Usage

STATE_SCHEMA = 1
RECENT_INPUTS = 64
"""How many applied ingress input ids a session remembers to recognise redeliveries."""


class RunConfig(BaseModel):
    """What a run was started with (kept so a follow-up `message` on an idle session
    starts its new run with the same settings)."""

    profile: str = "agentic"
    system: str | None = None
    models: list[str]
    max_tokens: int
    temperature: float | None = None
    memory_model: str | None = None
    """StartRun `model.memory`, else the lightweight model (`auto`), else
    LOOPWIRE_MEMORY_MODEL: the memory's own calls (model_tiers.py)."""
    lightweight_model: str | None = None
    """StartRun `model.lightweight` when `model.selection` is `auto`: the lightweight
    tier's model (model_tiers.py); None: every generation uses `models`."""
    tools: list[str] | None = None
    tool_permissions: dict[str, str] = Field(default_factory=dict)
    max_turns: int = 50
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    context_window: int = 200_000
    compaction_at_pct: float = 0.8
    actor: str | None = None
    """StartRun `strategy.actor`: memory keeps observations per actor."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    # -- profiles issue (schema 1, additive) --
    expectation: str | None = None
    """StartRun `strategy.expectation`."""
    strategy: str | None = None
    """Which strategy config the run resolved (strategy.py): `actor/expectation`, `actor`, or None."""
    subagent_depth: int = 0
    """0 for a run a user started; a child run started by a tool is its parent's + 1."""
    # -- external executors (schema 1, additive) --
    executor_agent: str | None = None
    """StartRun `executor.agent` (profile `acp`)."""
    workspace_path: str | None = None
    """`metadata.workspace` resolved under LOOPWIRE_WORKSPACE_ROOTS: the agent's directory."""
    # -- issue 26 (schema 1, additive) --
    conclusion: bool = False
    """The run's strategy config asks for a conclusion and the run offers the finish tool:
    its system prompt carries the tool's guideline, and an answer in text concludes with
    the technical summary (technical_summary.py, terminal `explanation`)."""
    # -- context fields (schema 1, additive) --
    user_id: str | None = None
    """StartRun `user_id`: tool providers get it as `Loopwire-User-Id`."""
    workspace_id: str | None = None
    """StartRun `metadata.workspace_id`: tool providers get it as `Loopwire-Workspace-Id`."""


class Checkpoint(BaseModel):
    """A durable human checkpoint (approval.py): everything needed to go on after the
    decision, so no process holds the paused run in memory."""

    id: str
    kind: Literal["tool_calls", "proposal", "executor"]
    """`executor`: an external agent's permission request, its step still running
    (executor_profiles.py)."""
    calls: list[dict[str, Any]] = Field(default_factory=list)
    """The whole batch: the assistant message's tool_use blocks, in the model's order."""
    ask: list[str] = Field(default_factory=list)
    """tool_use ids the decision is about (the others run or are answered regardless)."""
    rejected: dict[str, str] = Field(default_factory=dict)
    """tool_use id -> the plan gate's reason: never run, whatever the decision."""
    text: str = ""
    """The assistant's text (a `proposal` checkpoint's answer)."""


class RunState(BaseModel):
    model_config = {"populate_by_name": True}

    run_id: str
    config: RunConfig
    trace: dict[str, str] = Field(default_factory=dict)
    """traceparent of the run's root span: every step's spans are its children, and the
    replica that ends the run records the span itself with these ids."""
    started_ns: int = 0
    """When the run started (ns since the epoch), for the root span."""
    awaiting: str = Field(default="generate", alias="phase")
    """What the run waits for: `generate` (a model call is in flight), `tools` (tool calls
    are in flight), `approval` (a human decision), `done` (nothing: the run ended). Stored
    as `phase`, its name in documents written before the rename."""
    turn: int = 0
    """Generations completed in this run."""
    pending_step: str | None = None
    """The step id whose result the run waits for; any other result is stale."""
    pending_calls: list[dict[str, Any]] = Field(default_factory=list)
    """tool_use blocks of the last assistant message while their results are awaited."""
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    """The cost of the generations whose model has a price (shared/runtime/pricing.py)."""
    unpriced: list[str] = Field(default_factory=list)
    """Models of this run with no known price: its `cost_usd` is null (unknown), and a
    `warning` event named each one once."""
    last_text: str = ""
    """Text of the latest assistant message: the best answer so far."""
    answers: list[str] = Field(default_factory=list)
    """The texts of the run's answers, in order (answers.py): `run.ended.final_text`."""

    # -- loop control bookkeeping (schema 1, additive: older documents load with defaults) --
    gen_seq: int = 0
    """Generations requested in this run; the step id of the n-th is `<run_id>:g<n>`, so a
    retried or abandoned generation never shares an id (nor a Nats-Msg-Id) with the next."""
    outer: int = 1
    """Outer iterations: 1 + follow-ups taken at the outer boundary."""
    inner: int = 0
    """Generations completed in the current outer iteration."""
    task: str = ""
    """The run's first user request (truncated): the task the progress reminder repeats."""
    last_prompt: str = ""
    """The latest user request (truncated): what a bare-number answer is judged against."""
    last_context_tokens: int = 0
    """Input + output tokens of the latest generation: what the next call re-reads at least."""
    budget_warned: list[str] = Field(default_factory=list)
    """Limits (`max_total_tokens`, `max_cost_usd`) whose warning was emitted."""
    budget_capped: bool = False
    """The pending generation's `max_tokens` was shrunk by the token budget (budget.py):
    cut short at it, the run ends `budget_exhausted`."""
    converging: str | None = None
    """Set while the last, tool-less generation runs: the `run.ended` status it ends with."""
    converge_reason: str | None = None
    model_offset: int = 0
    """The loop ladder switched models: the run uses `config.models[model_offset:]`."""
    temperature: float | None = None
    """The loop ladder raised the temperature: overrides `config.temperature`."""
    loop_window: list[list[str]] = Field(default_factory=list)
    """Signatures of the latest turns (loop_detection.py), newest last."""
    loop_level: int = 0
    """Rungs of the escalation ladder climbed so far (0: none; a good turn resets it)."""
    vacuous_retries: int = 0
    nudges: int = 0
    context_retries: int = 0
    step_retries: int = 0
    """Generations requested again after a `cancelled` result (bounded)."""
    tool_calls_made: int = 0
    tools_used: list[str] = Field(default_factory=list)
    """Distinct tool names called in this run, in first-use order (progress reminder)."""
    executed: list[dict[str, Any]] = Field(default_factory=list)
    """`[{"tool", "calls", "ok", "error"}]` in first-use order: what the run executed, for
    the conclusion of a run the router stops (technical_summary.py)."""

    # -- profiles issue bookkeeping (schema 1, additive) --
    profile_phase: str = ""
    """The profile's phase (profiles.py transition table): `plan`/`execute`/`verify`,
    `review`/`execute`/`done`, ...; `awaiting` above is the step in flight."""
    phase_changes: int = 0
    """`phase.changed` events emitted in this run (their dedup keys count them)."""
    checkpoint: Checkpoint | None = None
    """The open approval checkpoint: the run is durably paused until a `decision`."""
    answered: list[dict[str, Any]] = Field(default_factory=list)
    """Results the core made itself for calls of the pending batch (reserved tools)."""
    plan: list[dict[str, Any]] = Field(default_factory=list)
    """agentic_planned: `[{"step": str, "status": "pending"|"in_progress"|"completed"}]`."""
    plan_nudges: int = 0
    verification: str | None = None
    """agentic_planned: the verify phase's answer, recorded."""
    workspace: str = ""
    """agentic_planned: the rendered WorkspaceSnapshot, a note of every plan-phase generation."""
    tools_known: list[str] | None = None
    """The run's tools the catalog held when it started (all of them for a run that names
    none); None: not looked up (the catalog was unreadable)."""
    tools_active: list[str] = Field(default_factory=list)
    """The tools the run's latest generation may use: offered, known, not denied, and the
    reserved tools of its phase (strategy_loop.active_tools; `session.get`)."""
    quota_spent: bool = False
    """The tenant's daily allowance was spent when this run's usage was last counted: its
    next generation is its converging one (`budget_exhausted`, reason `tenant_quota`)."""
    permission_answers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """External executors: checkpoint id -> `{"decision", "note"}` of the agent's
    permission requests decided in this run (asked again, they get the same answer)."""


class ForkedFrom(BaseModel):
    """Where a fork's history comes from (services/router/shell/fork.py)."""

    session_id: str
    seq: int
    """The source's event the fork was asked at."""
    cut_seq: int
    """The source's last event the fork's history includes (inside a run, the last complete turn)."""


class WaitingRun(BaseModel):
    """A run that waits for a slot of its tenant (tenant_quotas.py): everything its start
    needs, kept until it is admitted (it starts), refused or aborted."""

    run_id: str
    config: RunConfig
    messages: list[dict[str, Any]]
    sources: list[str] = Field(default_factory=list)
    """The `user.message` source of each message (`input`, `follow_up`, `steer`)."""
    plan: Any = None
    workspace: dict[str, Any] | None = None
    tools_known: list[str] | None = None
    """The run's tools the catalog held when it began (RunState.tools_known)."""
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
    queued: list[dict[str, Any]] = Field(default_factory=list)
    """Follow-up user messages waiting for the next outer boundary."""
    steering: list[dict[str, Any]] = Field(default_factory=list)
    """Steering messages: applied at the next boundary, before queued follow-ups."""
    plan: dict[str, Any] | None = None
    """The latest agentic_planned run's plan: `{"run_id", "steps", "phase", "verification"}`
    (kept after the run ends; `session.get` shows it)."""
    recent_inputs: list[str] = Field(default_factory=list)
    """Ids of the latest applied ingress inputs (`in:<stream seq>`): redeliveries are
    no-ops. Step results need no entry: one is applied only while its step is the pending
    one, and the latest input, whatever its kind, is `outbox_input`."""
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

    @classmethod
    def load(cls, raw: dict[str, Any] | None, session_id: str) -> SessionState:
        if raw is None:
            return cls(session_id=session_id)
        return cls.model_validate(raw)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def dump_json(self) -> bytes:
        """`dump()` as JSON bytes, serialised in one step (what the shell commits and caches)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True)

    @property
    def profile(self) -> str | None:
        if self.run is not None:
            return self.run.config.profile
        return self.last_config.profile if self.last_config else None
