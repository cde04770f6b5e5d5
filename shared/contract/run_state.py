"""The state of one run of a session: what it was started with (RunConfig), where it
is and what it spent (RunState), and the human checkpoint it may be paused on.

The router writes it (services/router/core/) inside the session's state
(session_state.py); the other services and the tools read it through the readers there.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.protocol import RunStatus


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
    LOOPWIRE_MEMORY_MODEL: the memory's own calls (step_requests.py, its model tiers)."""
    prompt_cache: str = "auto"
    """StartRun `model.prompt_cache` (`auto` or `off`); absent in older states: `auto`."""
    model_selection: str = "manual"
    """StartRun `model.selection` (`manual` or `auto`); absent in older states: `manual`."""
    lightweight_model: str | None = None
    """StartRun `model.lightweight` (else LOOPWIRE_LIGHTWEIGHT_MODEL) when `model.selection` is `auto`: the lightweight
    tier's model (step_requests.py, its model tiers); None: every generation uses `models`."""
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
    # -- the strategy loop's fields (schema 1, additive: absent in older states) --
    conclusion: bool = False
    """The run's strategy config asks for a conclusion and the run offers the finish tool:
    its system prompt carries the tool's guideline, and an answer in text concludes with
    the technical summary (services/router/core/finish.py, terminal `explanation`)."""
    max_inner_iterations: int | None = None
    """StartRun (or the strategy's) `limits.max_inner_iterations`, held to the operator's
    cap; None: the cap itself (tool_batches.inner_limit)."""
    max_outer_iterations: int | None = None
    """The same for `limits.max_outer_iterations` (tool_batches.outer_limit)."""
    progress_injection: str | None = None
    """`limits.progress_injection`; None: the profile's (tool_batches.progress_notes)."""
    over_ceiling: list[str] = Field(default_factory=list)
    """The limits the start asked above the operator's caps (held to them): a `warning`
    `limit_above_ceiling` at the start names them."""
    finish: bool = True
    """StartRun (or the strategy's) `finish` is not `false`: the profiles that offer the
    finish tool offer it to this run. Absent in older states: offered."""
    finish_tool: dict[str, Any] | None = None
    """The application's own finish tool (`{"description", "input_schema"}`), offered under
    the reserved name instead of the built-in one; its call's input is the conclusion as
    given. None: the built-in tool (services/router/core/finish.py)."""
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
    calls: list[ContentBlock] = Field(default_factory=list)
    """The whole batch: the assistant message's tool_use blocks, in the model's order."""
    ask: list[str] = Field(default_factory=list)
    """tool_use ids the decision is about (the others run or are answered regardless)."""
    rejected: dict[str, str] = Field(default_factory=dict)
    """tool_use id -> the plan gate's reason: never run, whatever the decision."""
    text: str = ""
    """The assistant's text (a `proposal` checkpoint's answer)."""


class RunBudget(BaseModel):
    """What the run spent, and what its token, cost and tenant limits made of it
    (accounting.py, budget.py, tenant_quotas.py)."""

    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    """The cost of the generations whose model has a price (shared/runtime/pricing.py)."""
    unpriced: list[str] = Field(default_factory=list)
    """Models of this run with no known price: its `cost_usd` is null (unknown), and a
    `warning` event named each one once."""
    last_context_tokens: int = 0
    """Input + output tokens of the latest generation: what the next call re-reads at least."""
    warned: list[str] = Field(default_factory=list)
    """Limits (`max_total_tokens`, `max_cost_usd`) whose warning was emitted."""
    capped: bool = False
    """The pending generation's `max_tokens` was shrunk by the token budget (budget.py):
    cut short at it, the run ends `budget_exhausted`."""
    quota_spent: bool = False
    """The tenant's daily allowance was spent when this run's usage was last counted: its
    next generation is its converging one (`budget_exhausted`, reason `tenant_quota`)."""


class RunLimits(BaseModel):
    """Loop control: iterations, convergence, the loop ladder and the bounded retries
    (tool_batches.py, loop_detection.py, vacuous.py, error_policy.py)."""

    outer: int = 1
    """Outer iterations: 1 + follow-ups taken at the outer boundary."""
    inner: int = 0
    """Generations completed in the current outer iteration."""
    converging: RunStatus | None = None
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


class RunTools(BaseModel):
    """The run's tools: what it may use, the batch in flight, what it ran (tool_batches.py,
    strategy_loop.py, finish.py)."""

    pending_calls: list[ContentBlock] = Field(default_factory=list)
    """tool_use blocks of the last assistant message while their results are awaited."""
    answered: list[ContentBlock] = Field(default_factory=list)
    """Results the core made itself for calls of the pending batch (reserved tools)."""
    calls_made: int = 0
    used: list[str] = Field(default_factory=list)
    """Distinct tool names called in this run, in first-use order (progress reminder)."""
    executed: list[dict[str, Any]] = Field(default_factory=list)
    """`[{"tool", "calls", "ok", "error"}]` in first-use order: what the run executed, for
    the conclusion of a run the router stops (finish.py `stopped_conclusion`)."""
    known: list[str] | None = None
    """The run's tools the catalog held when it started (all of them for a run that names
    none); None: not looked up (the catalog was unreadable)."""
    active: list[str] = Field(default_factory=list)
    """The tools the run's latest generation may use: offered, known, not denied, and the
    reserved tools of its phase (strategy_loop.active_tools; `session.get`)."""
    # -- schema 2, additive --
    reported: list[str] = Field(default_factory=list)
    """tool_use ids of the batch in flight whose `tool.result` the router emitted as the
    call finished (envelopes.ToolCallFinished), in that order; the batch's result emits
    the others' (services/router/core/call_reports.py)."""


class RunApprovals(BaseModel):
    """Human checkpoints (approval.py)."""

    checkpoint: Checkpoint | None = None
    """The open approval checkpoint: the run is durably paused until a `decision`."""


class RunPlan(BaseModel):
    """agentic_planned's plan, its verification and workspace note (planning.py)."""

    steps: list[dict[str, Any]] = Field(default_factory=list)
    """`[{"step": str, "status": "pending"|"in_progress"|"completed"}]`."""
    nudges: int = 0
    verification: str | None = None
    """The verify phase's answer, recorded."""
    workspace: str = ""
    """The rendered WorkspaceSnapshot, a note of every plan-phase generation."""


class RunExecutor(BaseModel):
    """An external executor's side of the run (executor_profiles.py)."""

    permission_answers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Checkpoint id -> `{"decision", "note"}` of the agent's permission requests decided
    in this run (asked again, they get the same answer)."""


RUN_PARTS = ("budget", "limits", "tools", "approvals", "plan", "executor")
"""RunState's parts, each a model of its own."""

PART_FIELDS: dict[str, dict[str, str]] = {
    "budget": {"usage": "usage", "cost_usd": "cost_usd", "unpriced": "unpriced",
               "last_context_tokens": "last_context_tokens", "budget_warned": "warned",
               "budget_capped": "capped", "quota_spent": "quota_spent"},
    "limits": {name: name for name in RunLimits.model_fields},
    "tools": {"pending_calls": "pending_calls", "answered": "answered", "tool_calls_made": "calls_made",
              "tools_used": "used", "executed": "executed", "tools_known": "known", "tools_active": "active"},
    "approvals": {"checkpoint": "checkpoint"},
    "plan": {"plan": "steps", "plan_nudges": "nudges", "verification": "verification", "workspace": "workspace"},
    "executor": {"permission_answers": "permission_answers"},
}
"""Schema 1's flat run fields, by the part that holds each in schema 2 and its name there."""


class RunState(BaseModel):
    """Where one run is, in parts by concern: what it spent (`budget`), its loop control
    (`limits`), its tools, approvals, plan, and an external executor's side."""

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
    gen_seq: int = 0
    """Generations requested in this run; the step id of the n-th is `<run_id>:g<n>`, so a
    retried or abandoned generation never shares an id (nor a Nats-Msg-Id) with the next."""
    last_text: str = ""
    """Text of the latest assistant message: the best answer so far."""
    answers: list[str] = Field(default_factory=list)
    """The texts of the run's answers, in order (answers.py): `run.ended.final_text`."""
    task: str = ""
    """The run's first user request (truncated): the task the progress reminder repeats."""
    last_prompt: str = ""
    """The latest user request (truncated): what a bare-number answer is judged against."""
    profile_phase: str = ""
    """The profile's phase (profiles.py transition table): `plan`/`execute`/`verify`,
    `review`/`execute`/`done`, ...; `awaiting` above is the step in flight."""
    phase_changes: int = 0
    """`phase.changed` events emitted in this run (their dedup keys count them)."""

    budget: RunBudget = Field(default_factory=RunBudget)
    limits: RunLimits = Field(default_factory=RunLimits)
    tools: RunTools = Field(default_factory=RunTools)
    approvals: RunApprovals = Field(default_factory=RunApprovals)
    plan: RunPlan = Field(default_factory=RunPlan)
    executor: RunExecutor = Field(default_factory=RunExecutor)

    @model_validator(mode="before")
    @classmethod
    def _parts_of_schema_1(cls, raw: Any) -> Any:
        """A schema 1 document's flat fields, moved into their parts (PART_FIELDS). Only
        `plan` has a name in both: schema 1's is the list of steps."""
        if not isinstance(raw, dict):
            return raw
        flat_plan = isinstance(raw.get("plan"), list)
        if not flat_plan and raw.keys().isdisjoint(_FLAT_NAMES):
            return raw
        doc = dict(raw)
        for part, names in PART_FIELDS.items():
            moved = {new: doc.pop(old) for old, new in names.items()
                     if old in doc and (old != "plan" or flat_plan)}
            if moved:
                doc[part] = moved
        return doc


_FLAT_NAMES = frozenset(old for names in PART_FIELDS.values() for old in names) - {"plan"}
