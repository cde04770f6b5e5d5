"""A run's start and its end: `run.started` and `run.ended`, and the session around them.

`start_run` makes the run (its settings under the operator's tool policy as it is now,
its task, `init` and the move to its profile's working phase, a pre-built plan, the
workspace snapshot) and asks for its first generation. `end_run` is the one way a run ends, whatever ends it: an
`error` first when a failure ends it, never `completed` over budget, dangling tool_use
blocks answered (history_repair.py), the best answer so far (or the technical summary of
a run the router stopped) as its final text, a completed run moved to `done`, the
session idle again, and follow-ups that
came too late for the last boundary starting the next run.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.event_fields import ErrorFields, RunEndedFields, RunStartedFields, WarningFields
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.protocol import RunStatus, StartRun
from loopwire.shared.contract.run_state import RunConfig, RunState
from loopwire.shared.contract.session_state import WaitingRun

from . import answers, budget, planning, strategy_loop, tenant_quotas
from .config import CoreConfig
from .finish import stopped_conclusion
from .follow_ups import PROMPT_CHARS, drain_queued, drain_steering, truncate
from .history_repair import close_dangling_tool_uses
from .inputs import BaseInput, StartInput
from .profiles import DONE, PROFILES
from .run_config import lineage, run_config
from .stages import user_text
from .step_requests import move_phase, request_generation
from .tool_policy import merge_permissions
from .transition import Decision, Transition
from .workspace import render as render_workspace


def begin_run(tx: Transition, config: RunConfig, messages: list[Message], *, run_id: str,
              cfg: CoreConfig, source: str, plan: Any = None, workspace: dict[str, Any] | None = None,
              tools_known: list[str] | None = None) -> None:
    """A new run: started now, or, with tenant limits (tenant_quotas.py), waiting for a
    slot of its tenant: the session is `queued` until the admission answers. The caller
    checked `tenant_quotas.refusal`."""
    if cfg.tenant_limits is None:
        start_run(tx, config, messages, run_id=run_id, cfg=cfg, plan=plan, workspace=workspace, source=source,
                  tools_known=tools_known)
        return
    known = strategy_loop.known_tools(config.tools, tx.inp.catalog_tools)
    start = tx.inp if isinstance(tx.inp, StartInput) else None
    tx.st.waiting = WaitingRun(run_id=run_id, config=config, messages=messages, sources=[source] * len(messages),
                               plan=plan, workspace=workspace, tools_known=known if known is not None else tools_known,
                               ignored_fields=start.ignored_fields if start else [],
                               unknown_tools=start.unknown_tools if start else [])
    tx.st.status = "queued"


def new_run(tx: Transition, inp: BaseInput, cfg: CoreConfig, *, messages: list[Message], source: str,
            config: RunConfig | None = None, plan: Any = None, workspace: dict[str, Any] | None = None) -> Decision:
    """The run an input begins (`config`: else the session's last settings, for a follow-up
    or a steer on an idle session), or its refusal when the tenant's day is spent."""
    if (refused := tenant_quotas.refused_start(tx, inp, cfg)) is not None:
        return refused
    config = config or tx.st.last_config or run_config(StartRun(input="-"), cfg)
    begin_run(tx, config, messages, run_id=inp.new_id, cfg=cfg, source=source, plan=plan, workspace=workspace)
    return tx.finish()


def end_waiting(tx: Transition, status: RunStatus, *, reason: str | None = None, text: str = "") -> None:
    """A waiting run ends before it started (an abort; a slot granted on a day whose
    allowance is spent): no turns, nothing spent; the follow-ups sent meanwhile go with it."""
    st = tx.st
    w = st.waiting
    assert w is not None
    ended = RunEndedFields(status=status, final_text=text, conclusion=None, turns=0,
                           usage={"input_tokens": 0, "output_tokens": 0}, cost_usd=0.0)
    if reason:
        ended["reason"] = reason
    tx.emit("run.ended", message_ids.event_key("run.ended", w.run_id), w.run_id, ended)
    st.waiting = None
    st.status = "idle"
    st.queued.clear()
    st.steering.clear()


def start_run(tx: Transition, config: RunConfig, messages: list[Message], *, run_id: str,
              cfg: CoreConfig, plan: Any = None, workspace: dict[str, Any] | None = None,
              source: str | None = None, tools_known: list[str] | None = None, sources: list[str] | None = None,
              ignored_fields: list[str] | None = None, unknown_tools: list[str] | None = None) -> None:
    """Start a run. `tools_known`: the run's tools the catalog held, when this input did
    not look the catalog up (the next run started by follow-ups: the last run's; a waiting
    run's, looked up when it began). `sources`: each message's `user.message` source (else
    `source`); `ignored_fields`, `unknown_tools`: a waiting start's (else the StartInput's)."""
    st = tx.st
    # The operator's policy as it is now, also over a follow-up's stored settings.
    config = config.model_copy(update={"tool_permissions": merge_permissions(cfg.tool_policy,
                                                                              config.tool_permissions)})
    run = RunState(run_id=run_id, config=config, trace=tx.inp.new_trace, started_ns=tx.inp.now_ns)
    prompts = [user_text(m["content"]) for m in messages if m["role"] == "user"]
    run.task = truncate(prompts[-1] if prompts else "", PROMPT_CHARS)
    known = strategy_loop.known_tools(config.tools, tx.inp.catalog_tools)
    run.tools.known = known if known is not None else tools_known
    run.last_prompt = run.task
    st.run = run
    st.status = "running"
    st.last_config = config
    st.runs += 1
    for n, m in enumerate(messages):
        tx.add_message(m, sources[n] if sources else source)
    # `config` (loopwire's addition, docs/protocol.md) lets a session be rebuilt from its transcript with its settings.
    profile = PROFILES[config.profile]
    run.profile_phase = profile.initial_phase
    if ignored_fields is None and isinstance(tx.inp, StartInput):
        ignored_fields = tx.inp.ignored_fields
    started = RunStartedFields(profile=config.profile, config=config.model_dump(mode="json"), **lineage(config))
    if ignored_fields:
        started["ignored_fields"] = ignored_fields
    tx.emit("run.started", message_ids.event_key("run.started", run_id), run_id, started)
    unknown = unknown_tools if unknown_tools is not None else \
        tx.inp.unknown_tools if isinstance(tx.inp, StartInput) else []
    if unknown:
        tx.emit("warning", f"warning:{run_id}:unknown_tools", run_id, WarningFields(code="unknown_tools",
                message=f"no tool named {', '.join(unknown)} is known; the run goes on without "
                        f"{'it' if len(unknown) == 1 else 'them'}", tools=unknown))
    if config.over_ceiling:
        tx.emit("warning", f"warning:{run_id}:limit_above_ceiling", run_id, WarningFields(code="limit_above_ceiling",
                message=f"{', '.join(config.over_ceiling)} above the operator's cap: the run is held to the cap",
                limits=list(config.over_ceiling)))
    if config.model_selection == "auto" and config.lightweight_model is None:
        tx.emit("warning", f"warning:{run_id}:no_lightweight_model", run_id, WarningFields(code="no_lightweight_model",
                message="model.selection is auto but no lightweight model is named (model.lightweight, "
                        "LOOPWIRE_LIGHTWEIGHT_MODEL): every generation uses the run's own models"))
    move_phase(tx, run, profile.working_phase, profile=profile)
    if profile.snapshots_workspace:
        run.plan.workspace = render_workspace(workspace)
    if profile.planned:
        steps = planning.parse_plan(plan) if plan is not None else []
        if steps:  # a pre-built plan skips the plan phase
            run.plan.steps = steps
            move_phase(tx, run, "execute", profile=profile)
            tx.emit_spec(run, planning.record(st, run, "start"), message_ids.event_key("plan.updated", run_id, "start"))
    request_generation(tx, run, profile)


def end_run(tx: Transition, status: RunStatus, text: str | None, *, cfg: CoreConfig,
            error: tuple[str, str] | None = None,
            reason: str | None = None, conclusion: dict[str, Any] | None = None,
            closing: str | None = None) -> None:
    """End the run with `status`. Its final text is its answers and then `closing` (an
    answer that is no turn's text: the finish tool's summary, the approved proposal;
    answers.py); with none, `text` (the latest turn's) or the best text so far."""
    st = tx.st
    run = st.run
    assert run is not None
    if error is not None:
        tx.emit("error", message_ids.event_key("error", run.run_id, status), run.run_id,
                ErrorFields(code=error[0], message=error[1], action="terminate"))
    spent = budget.used_up(run) if status == "completed" else None
    if spent is not None:  # never `completed` over budget, however the run got here
        status, reason = "budget_exhausted", spent
    close_dangling_tool_uses(tx, run, status)
    profile = PROFILES[run.config.profile]
    if status == "completed" and profile.can_complete_from(run.profile_phase):
        # A completed run reports `done` (profiles.py); one stored in a phase older
        # routers had (`act`, `chat`) has no move to it and ends where it is.
        move_phase(tx, run, DONE, profile=profile)
    final_text = answers.final_text(run.answers, closing, text if text is not None and text.strip() else run.last_text)
    if conclusion is None:
        conclusion = stopped_conclusion(run, status, final_text, reason=reason)
    if not final_text.strip() and conclusion is not None:
        final_text = conclusion["summary"]  # never silently: the summary is the best answer left
    ended = RunEndedFields(status=status, final_text=final_text, conclusion=conclusion, turns=run.turn,
                           message_count=st.history_len,
                           usage=run.budget.usage.event_usage(),
                           cost_usd=None if run.budget.unpriced else round(run.budget.cost_usd, 8))
    if reason:
        ended["reason"] = reason
    tx.emit("run.ended", message_ids.event_key("run.ended", run.run_id), run.run_id, ended)
    run.awaiting = "done"
    run.pending_step = None
    run.approvals.checkpoint = None
    st.run = None
    st.status = "idle"
    if cfg.tenant_limits is not None:
        st.ended_run = tenant_quotas.totals_of(run)  # counted again until a count succeeds
    if (st.queued or st.steering) and st.last_config is not None:
        # Follow-ups that arrived too late for the last boundary start the next run.
        content = drain_steering(st) + drain_queued(st)
        refused = tenant_quotas.refusal(tx, cfg)
        if refused is not None:
            tx.emit("error", message_ids.event_key("error", message_ids.next_run_id(run.run_id)), None, ErrorFields(code=refused[0], message=refused[1],
                    limit=refused[2]))
        else:
            begin_run(tx, st.last_config, [{"role": "user", "content": content}], run_id=message_ids.next_run_id(run.run_id),
                      cfg=cfg, source="follow_up", tools_known=run.tools.known)
