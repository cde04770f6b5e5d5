"""The router's core: `decide(state, input) -> Decision`, with no I/O.

The shell (service.py) loads the session, calls `decide`, commits the new state and the
history it appends in one compare-and-set, then performs the effects. Everything the run
does is visible here as data: which messages join the history, which events are emitted,
which work is published, which notices are sent, and what the shell should count.

The loop-control rules live in their own modules and are called from here:
budget.py (ledger, limits, converging), iteration_limits.py (turns, inner and outer
iterations), loop_detection.py / vacuous.py / commitment_gate.py (post-generation
stages, in the profile's order), progress_injection.py (reminder after tool results) and
error_policy.py (what a failed step does to the run). Steering and abort are handled here.

The profiles issue adds (docs/profiles.md): profile phases and their transition tables
(profiles.py, phases.py), the strategy loop's plan gate and preview (strategy_loop.py),
durable approval checkpoints and `decision` (approval.py), the finish tool (finish.py),
agentic_planned's plan, execute and verify phases (planning.py), strategy configs
(strategy.py, resolved by the shell) and subagent depth (subagent.py). The operator's
tool policy is the floor of every run's permissions (tool_policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from loopwire.shared.contract.envelopes import (
    AssembleContext,
    ExecuteTools,
    GenerationResult,
    ToolCall,
    ToolsResult,
    Usage,
)
from loopwire.shared.contract.events import user_message_fields
from loopwire.shared.contract.protocol import Limits, StartRun, text_to_content
from loopwire.shared.runtime.pricing import cost_at, is_offline_model, price_for

from . import approval, budget, loop_detection, planning, strategy_loop, subagent, technical_summary
from .config import CoreConfig
from .effects import Effect, EmitEvent, PublishNotice, PublishWork, effect_from_dict
from .error_policy import classify_generation_failure
from .executor_profiles import decide_permission, open_permission, settle_permission, spec_for
from .finish import FINISH_TOOL, FINISHED_RESULT, OUT_OF_BUDGET_NOTE, finish_call, out_of_budget_conclusion
from .inputs import (
    AbortInput,
    BaseInput,
    DecisionInput,
    GenerationInput,
    MessageInput,
    PermissionInput,
    RejectedInput,
    StartInput,
    SteerInput,
    ToolsInput,
    UndeliverableInput,
)
from .iteration_limits import inner_limit, outer_limit
from .next_step import (
    NextStep,
    NextStepConverge,
    NextStepExecuteTools,
    NextStepFinalOutput,
    NextStepReview,
    NextStepRunAgain,
)
from .phases import change_phase
from .profiles import get_profile
from .progress_injection import note_tool_batch, progress_notes, truncate
from .stages import Turn, not_executed, user_text
from .state import RECENT_INPUTS, RunConfig, RunState, SessionState
from .strategy import StrategyConfig
from .tool_policy import merge_permissions, narrow_tools
from .workspace import render as render_workspace

__all__ = ["CoreConfig", "Count", "Decision", "decide"]

STEERED_GENERATION = "steered: the answer in progress is void"
STEERED_TOOL = "Cancelled by steering: the user sent a new instruction before this call finished."
PROMPT_CHARS = 2000


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
    append: list[dict[str, Any]] = field(default_factory=list)
    """Messages this transition adds to the session's history."""
    history_len_before: int = 0
    replay: bool = False
    """The input was applied before: perform the stored outbox again, commit nothing."""
    counts: list[Count] = field(default_factory=list)


class _Tx:
    """The working copy of one transition."""

    def __init__(self, state: SessionState, inp: BaseInput, owned: bool = False) -> None:
        # A working copy the transition may change freely (a JSON round trip is ~3x faster
        # than model_copy(deep=True) on this model), unless the caller hands the state over.
        self.st = state if owned else SessionState.model_validate_json(state.model_dump_json(by_alias=True))
        self.history_len_before = state.history_len
        self.inp = inp
        self.effects: list[Effect] = []
        self.append: list[dict[str, Any]] = []
        self.sources: dict[int, str] = {}
        """The `user.message` source of an appended message, where the input's is not it
        (follow-ups taken at the outer boundary of a step's result)."""
        self.counts: list[Count] = []

    def emit(self, kind: str, key: str, run_id: str | None, **fields: Any) -> None:
        self.effects.append(EmitEvent(kind=kind, key=key, run_id=run_id, fields=fields))

    def count(self, name: str, labels: dict[str, str] | None = None, **values: float) -> None:
        self.counts.append(Count(name, labels or {}, values))

    def add_message(self, message: dict[str, Any], source: str | None = None) -> None:
        if source is not None:
            self.sources[len(self.append)] = source
        self.append.append(message)
        self.st.history_len += 1

    def finish(self) -> Decision:
        st = self.st
        self._report_user_messages()
        if not isinstance(self.inp, GenerationInput | ToolsInput):
            st.recent_inputs = (st.recent_inputs + [self.inp.input_id])[-RECENT_INPUTS:]
        st.ingress_seq = max(st.ingress_seq, self.inp.ingress_seq)
        st.outbox = [e.model_dump(mode="json") for e in self.effects] + self._work_in_flight()
        st.outbox_input = self.inp.input_id
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

    def _model_wrote(self, message: dict[str, Any]) -> bool:
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
        events = [EmitEvent(kind="user.message", key=f"user.message:{self.inp.input_id}:{n}",
                            run_id=self.st.run.run_id if self.st.run else None,
                            fields=user_message_fields(m, turn, self.sources.get(n, source), reported))
                  for n, m in enumerate(self.append) if not self._model_wrote(m)]
        if not events:
            return
        at = next((k for k, e in enumerate(self.effects)
                   if not isinstance(e, EmitEvent) or e.kind == "run.ended"), len(self.effects))
        self.effects[at:at] = events


_USER_SOURCES: dict[type, str] = {StartInput: "input", MessageInput: "follow_up", SteerInput: "steer"}


def decide(state: SessionState, inp: BaseInput, cfg: CoreConfig = CoreConfig(), owned: bool = False) -> Decision:
    """The next state and the effects for `inp`. `state` is left as it was, unless the
    caller hands it over with `owned=True` (it was made for this call and is not used
    after it; the shell does that to save a copy per input)."""
    if inp.ingress_seq and inp.ingress_seq <= state.ingress_seq:
        # Applied already, in stream order: by this replica before a crash, or by another
        # one as the backlog of a later input. The replica it was delivered to holds it
        # unacked until the work it started is surely out, so that one performs the
        # session's current outbox again (it keeps the work in flight: _work_in_flight);
        # a replica that only read it from the stream leaves it alone.
        return Decision(state=None) if inp.backlog else _replay(state)
    if state.outbox_input == inp.input_id:
        return _replay(state)  # the latest input again: its effects may not have gone out
    if inp.input_id in state.recent_inputs:
        return _replay(state) if inp.recover else Decision(state=None)
    if isinstance(inp, RejectedInput):
        return _settled(state, inp, _reject(state, inp, inp.code, inp.message))
    # An ingress input keeps `state` intact: if it is refused, _settled starts from it.
    tx = _Tx(state, inp, owned and not inp.ingress_seq)
    handled = _HANDLERS[type(inp)](tx, inp, cfg)
    if handled is None:
        late = _result_events(inp)  # owed even by a result the run moved past
        decision = _replay(state) if inp.recover else Decision(state=None)
        decision.effects[:0] = late
        return decision
    return _settled(state, inp, handled)


def _settled(state: SessionState, inp: BaseInput, decision: Decision) -> Decision:
    """An ingress input refused on a session that exists (`session_busy`, `no_active_run`,
    ...) still moves the session's ingress position past it, with its `error` as the
    outbox: decided once, it is never decided again (by then the answer could differ).
    A session that does not exist stays so: nothing is stored for a refused input, and
    deciding it again gives the same refusal."""
    if decision.state is not None or decision.replay or not inp.ingress_seq or not _stored(state):
        return decision
    st = state.model_copy()
    st.recent_inputs = (st.recent_inputs + [inp.input_id])[-RECENT_INPUTS:]
    st.ingress_seq = max(st.ingress_seq, inp.ingress_seq)
    st.outbox = [e.model_dump(mode="json") for e in decision.effects]
    st.outbox_input = inp.input_id
    return Decision(state=st, effects=decision.effects, history_len_before=state.history_len,
                    counts=decision.counts)


def _stored(state: SessionState) -> bool:
    """The state was committed before (every commit records its input; a state rebuilt from
    a transcript has its history)."""
    return state.outbox_input is not None or state.history_len > 0 or state.runs > 0


def _replay(state: SessionState) -> Decision:
    """The stored outbox of the session's last transition, to be performed again."""
    return Decision(state=None, effects=[effect_from_dict(e) for e in state.outbox], replay=True)


def _reject(state: SessionState, inp: BaseInput, code: str, message: str) -> Decision:
    """An `error` event on the session and nothing else: no state is created or changed."""
    run_id = state.run.run_id if state.run else None
    return Decision(state=None, effects=[EmitEvent(kind="error", key=f"error:{inp.input_id}", run_id=run_id,
                                                   fields={"code": code, "message": message})])


# -- ingress ------------------------------------------------------------------------------
def _on_start(tx: _Tx, inp: StartInput, cfg: CoreConfig) -> Decision:
    body = inp.body
    profile = get_profile(body.profile)
    if not profile.implemented:
        return _reject(tx.st, inp, "unsupported_profile",
                       f"profile '{body.profile}' is part of the contract but not available in this "
                       "version (external executors come later); use 'agentic', 'agentic_planned', "
                       "'turn_by_turn' or 'conversational'")
    if inp.workspace_refusal is not None:
        return _reject(tx.st, inp, "workspace_not_allowed", inp.workspace_refusal)
    if tx.st.status != "idle":
        return _reject(tx.st, inp, "session_busy",
                       f"session {tx.st.session_id} already has an active run; publish `message` to "
                       "follow up or `abort` it first")
    parent = inp.parent_session_id or subagent.parent_of(body.metadata)
    recorded = tx.st.last_config.subagent_depth if tx.st.last_config else 0
    depth = subagent.child_depth(body.metadata, parent, inp.parent_depth, recorded)
    if depth > cfg.max_subagent_depth:
        return _reject(tx.st, inp, "subagent_depth_exceeded",
                       f"a child run at subagent depth {depth} is deeper than the limit "
                       f"({cfg.max_subagent_depth}, LOOPWIRE_MAX_SUBAGENT_DEPTH)")
    strategy = StrategyConfig.model_validate(inp.strategy) if inp.strategy else None
    config = _run_config(body, cfg, strategy, depth)
    if parent is not None and subagent.parent_of(config.metadata) != parent:
        config.metadata = {**config.metadata, subagent.PARENT_SESSION: parent}
    config.workspace_path = inp.workspace_path
    messages = _input_messages(body)
    return _start_run(tx, config, messages, run_id=inp.new_id, cfg=cfg, plan=body.plan, workspace=inp.workspace)


def _on_message(tx: _Tx, inp: MessageInput, cfg: CoreConfig) -> Decision:
    """A follow-up: starts a run on an idle session, else waits for the outer boundary."""
    user = {"role": "user", "content": text_to_content(inp.body.content)}
    if tx.st.status == "idle":
        config = tx.st.last_config or _run_config(StartRun(input="-"), cfg)
        return _start_run(tx, config, [user], run_id=inp.new_id, cfg=cfg)
    tx.st.queued.append(user)
    return tx.finish()


def _on_steer(tx: _Tx, inp: SteerInput, cfg: CoreConfig) -> Decision:
    """Steering applies now, even mid-step: the in-flight generation is abandoned (its
    text is retracted) or the in-flight tool calls are (each gets a "cancelled by
    steering" result, so the history stays valid); the services doing that work get a
    cancel notice; the message joins the history and a new generation is requested. The
    abandoned step's late result no longer matches `pending_step` and is ignored."""
    st = tx.st
    user = {"role": "user", "content": text_to_content(inp.body.content)}
    run = st.run
    if st.status == "idle" or run is None:
        config = st.last_config or _run_config(StartRun(input="-"), cfg)
        return _start_run(tx, config, [user], run_id=inp.new_id, cfg=cfg)
    content = list(user["content"])
    if run.awaiting in ("tools", "approval") and run.pending_calls:
        content = _batch_results(run, run.pending_calls, STEERED_TOOL) + content
        run.pending_calls = []
        run.answered = []
    elif run.awaiting == "generate" and run.pending_step is not None:
        tx.emit("retracted", f"retracted:{run.pending_step}:steer", run.run_id, turn=run.turn + 1,
                reason=STEERED_GENERATION)
    if run.checkpoint is not None:  # a steer withdraws the open checkpoint
        approval.close(st, run)  # turn_by_turn stays in review: the next reply is reviewed
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))
    tx.add_message({"role": "user", "content": content})
    run.last_prompt = truncate(user_text(user["content"]), PROMPT_CHARS)
    loop_detection.clear(run)
    tx.count("steer")
    _request_generation(tx, run)
    return tx.finish()


def _on_abort(tx: _Tx, inp: AbortInput, cfg: CoreConfig) -> Decision:
    run = tx.st.run
    if run is None:
        return _reject(tx.st, inp, "no_active_run", f"session {tx.st.session_id} has no active run to abort")
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))
    _end_run(tx, "aborted", None, cfg, start_queued=False, reason=inp.body.reason)
    return tx.finish()


def _on_decision(tx: _Tx, inp: DecisionInput, cfg: CoreConfig) -> Decision:
    """The answer to the open checkpoint (approval.py): the run goes on from the stored
    checkpoint, with no new model call."""
    body = inp.body
    cp = approval.open_for(tx.st, body.checkpoint_id)
    run = tx.st.run
    if cp is None or run is None:
        return _reject(tx.st, inp, "unknown_checkpoint",
                       f"checkpoint {body.checkpoint_id} is unknown or already answered")
    if cp.kind == "executor":  # the agent waits for it in its step (executor_profiles.py)
        tx.effects.extend(decide_permission(tx.st, run, cp, body))
        return tx.finish()
    approval.close(tx.st, run)
    approved = body.decision == "approve"
    if cp.kind == "proposal":
        if approved:  # the approved answer is carried out: it is the run's answer
            _phase(tx, run, "execute")
            _phase(tx, run, "done")
            _end_run(tx, "completed", cp.text, cfg)
        else:
            _phase(tx, run, "review")  # another round of review
            tx.add_message(approval.proposal_denied_message(body.note))
            _request_generation(tx, run)
        return tx.finish()
    denied = dict(cp.rejected)
    if not approved:
        denied.update(approval.user_denials(cp, body.note))
    if run.profile_phase == "review":
        _phase(tx, run, "execute" if approved else "review")
    _execute(tx, run, cp.calls, denied)
    return tx.finish()


def _on_permission(tx: _Tx, inp: PermissionInput, cfg: CoreConfig) -> Decision:
    """An external agent asks before running an `approve` tool, its step in flight."""
    run = tx.st.run
    if run is None or run.pending_step != inp.request.step_id:
        return Decision(state=None)  # stale: the step was abandoned (its agent is stopped)
    changed, effects = open_permission(tx.st, run, inp.request)
    if not changed:
        return Decision(state=None, effects=effects)
    tx.effects.extend(effects)
    return tx.finish()


def _on_undeliverable(tx: _Tx, inp: UndeliverableInput, cfg: CoreConfig) -> Decision | None:
    """Work that will not be done: the run it belongs to ends `failed` (its best answer so
    far, dangling tool calls answered), the session is idle and takes new input (queued
    follow-ups start the next run). Work of a run that already ended only leaves the error."""
    run = tx.st.run
    message = f"{inp.what or 'work'} could not be delivered: {inp.reason or 'gave up'}"
    if run is None or inp.run_id is None or run.run_id != inp.run_id:
        if inp.run_id is None:  # ingress: the client's input was not applied
            return _reject(tx.st, inp, UNDELIVERABLE, message)
        return None
    if inp.step_id is not None and run.pending_step != inp.step_id:
        return None  # the watchdog's step was answered since it looked
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))  # whatever still runs
    _end_run(tx, "failed", None, cfg, error=(UNDELIVERABLE, message), reason=UNDELIVERABLE)
    return tx.finish()


UNDELIVERABLE = "undeliverable"


# -- step results -------------------------------------------------------------------------
def _on_generation(tx: _Tx, inp: GenerationInput, cfg: CoreConfig) -> Decision | None:
    result: GenerationResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None  # stale: the run ended or moved on (abort, steer) while this was in flight
    run.pending_step = None
    settle_permission(tx.st, run)
    _account_extra(tx, run, result, cfg)
    if not result.ok or result.message is None:
        _on_failed_generation(tx, run, result, cfg)
        return tx.finish()

    _account(tx, run, result, cfg)
    message = result.message
    text = _text_of(message)
    tool_calls = [b for b in message.get("content", []) if b.get("type") == "tool_use"]
    tx.emit("message", f"message:{result.step_id}", run.run_id, turn=run.turn, message=message,
            model=result.model, stop_reason=result.stop_reason,
            usage={"input_tokens": result.usage.total_input(), "output_tokens": result.usage.output_tokens})
    for warning in budget.warnings_due(run, cfg.budget_warning_pct):
        run.budget_warned.append(warning["limit"])
        tx.emit("budget.warning", f"budget.warning:{run.run_id}:{warning['limit']}", run.run_id, **warning)

    turn = Turn(session=tx.st, run=run, message=message, stop_reason=result.stop_reason, text=text,
                tool_calls=tool_calls, mode=_mode(run), config=cfg, step_id=result.step_id,
                transitions=get_profile(run.config.profile).transitions)
    step = _next_step(turn)
    step = _within_limits(run, step, text, cfg)
    if isinstance(step, NextStepFinalOutput) and step.status == "completed":
        cause = budget.end_cause(run, result.stop_reason)
        if cause is not None:  # the budget stopped this run, whatever the model meant
            step = replace(step, status="budget_exhausted", reason=cause)

    if not (isinstance(step, NextStepRunAgain) and step.drop_turn):
        if message.get("content"):
            tx.add_message(message)
        if text.strip():
            run.last_text = text
    for n, spec in enumerate(step.events):
        tx.emit(spec.kind, f"{spec.kind}:{result.step_id}:{n}", run.run_id, **spec.fields)
    if isinstance(step, NextStepRunAgain) and step.retract:
        tx.emit("retracted", f"retracted:{result.step_id}", run.run_id, turn=run.turn, reason=step.retract)
    _apply(tx, run, step, cfg, schemas=inp.tool_schemas)
    return tx.finish()


def _next_step(turn: Turn) -> NextStep:
    """The converging answer ends the run; otherwise the profile's stages decide."""
    run = turn.run
    if run.converging is not None:
        conclusion, text = None, turn.text
        call = finish_call(turn.tool_calls) if run.converging == "budget_exhausted" else None
        if call is not None and strategy_loop.finish_offered(run):
            conclusion = out_of_budget_conclusion(call, turn.text, run.last_text)
            conclusion["executed"] = [dict(e) for e in run.executed]
            text = conclusion["summary"]
        # Without a finish call, _end_run gives the run its technical summary.
        return NextStepFinalOutput(status=run.converging, text=text, reason=run.converge_reason,
                                   conclusion=conclusion)
    step: NextStep | None = None
    for stage in get_profile(run.config.profile).stages:
        step = stage.after_generation(turn)
        if step is not None:
            break
    if not turn.flags:
        # An accepted turn restores the remedies: the loop ladder and the vacuous-retry
        # allowance are shared, so a long run keeps them after using them (vacuous.py).
        run.loop_level = 0
        run.vacuous_retries = 0
    return step or NextStepFinalOutput(status="completed", text=turn.text)


def _within_limits(run: RunState, step: NextStep, text: str, cfg: CoreConfig) -> NextStep:
    """A step that would generate again past a limit ends the run instead, keeping the
    turn (a vacuous answer that would have been retried is passed through)."""
    if isinstance(step, NextStepFinalOutput | NextStepReview):
        return step  # a review needs no further generation: approved, it is the answer
    limit = inner_limit(run, cfg)
    if limit is None:
        return step
    if isinstance(step, NextStepConverge):
        return NextStepFinalOutput(status=step.status, text=text, reason=step.reason, events=step.events)
    # The step's events stay: its stage already moved the run (e.g. a phase change).
    return NextStepFinalOutput(status="max_turns", text=text, reason=limit, events=step.events)


def _on_failed_generation(tx: _Tx, run: RunState, result: GenerationResult, cfg: CoreConfig) -> None:
    verdict = classify_generation_failure(result.error, run, cfg)
    if verdict.action == "terminate":
        status = run.converging or "failed"
        _end_run(tx, status, None, cfg, error=(verdict.code, verdict.message),
                 reason=run.converge_reason if run.converging else verdict.code)
        return
    tx.emit("error", f"error:{result.step_id}", run.run_id, code=verdict.code, message=verdict.message,
            action=verdict.action)
    if verdict.action == "continue":
        run.step_retries += 1
    elif verdict.action == "retry_reduced_context":
        run.context_retries += 1
    else:  # switch_model
        models = run.config.models
        tx.emit("model.fallback", f"model.fallback:{result.step_id}", run.run_id,
                from_model=models[run.model_offset], to_model=models[run.model_offset + 1], reason=verdict.code)
        run.model_offset += 1
    _request_generation(tx, run)


def _result_events(inp: BaseInput) -> list[Effect]:
    """The `tool.result` events (each followed by `tools.progress`, as the tools service
    emits them) of a step whose tools service left them to the router
    (`ToolsResult.results_reported`: a single call), first among the transition's effects."""
    if not isinstance(inp, ToolsInput) or inp.result.results_reported:
        return []
    r = inp.result
    out: list[Effect] = []
    for n, item in enumerate(r.results, 1):
        out.append(EmitEvent(kind="tool.result", key=f"tool.result:{item.tool_use_id}", run_id=r.run_id,
                             fields={"turn": r.turn, "tool_use_id": item.tool_use_id, "name": item.name,
                                     "is_error": item.is_error, "content": item.content}))
        out.append(EmitEvent(kind="tools.progress", key=f"tools.progress:{item.tool_use_id}", run_id=r.run_id,
                             fields={"turn": r.turn, "total": len(r.results), "completed": n}))
    return out


def _on_tools(tx: _Tx, inp: ToolsInput, cfg: CoreConfig) -> Decision | None:
    result: ToolsResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None
    tx.effects.extend(_result_events(inp))
    run.pending_step = None
    by_id = {r.tool_use_id: r for r in result.results}
    answered = {b["tool_use_id"]: b for b in run.answered}
    blocks = []
    for call in run.pending_calls:
        item = by_id.get(call["id"])
        if call["id"] in answered:
            blocks.append(answered[call["id"]])  # a reserved tool, answered by the core
        elif item is None:
            blocks.append({"type": "tool_result", "tool_use_id": call["id"], "is_error": True,
                           "content": "no result was returned for this call"})
        else:
            blocks.append(item.as_block())  # an error result is a result: the model adapts
    _after_batch(tx, run, blocks)
    return tx.finish()


def _after_batch(tx: _Tx, run: RunState, blocks: list[dict[str, Any]]) -> None:
    """summarize: the batch's results go back in one user message, in the model's order,
    and the next generation is reminded of the task and the progress."""
    names = {c["id"]: c["name"] for c in run.pending_calls}
    run.pending_calls = []
    run.answered = []
    note_tool_batch(run, blocks, names)
    technical_summary.record_batch(run, blocks, names)
    content: list[dict[str, Any]] = blocks + _drain_steering(tx.st)
    tx.add_message({"role": "user", "content": content})
    profile = get_profile(run.config.profile)
    notes = progress_notes(profile.progress_injection, run, blocks, names)
    _request_generation(tx, run, notes=notes)


# -- transitions ----------------------------------------------------------------------------
def _start_run(tx: _Tx, config: RunConfig, messages: list[dict[str, Any]], run_id: str,
               cfg: CoreConfig, plan: Any = None, workspace: dict[str, Any] | None = None,
               source: str | None = None) -> Decision:
    st = tx.st
    # The operator's policy as it is now, also over a follow-up's stored settings.
    config = config.model_copy(update={"tool_permissions": merge_permissions(cfg.tool_policy,
                                                                              config.tool_permissions)})
    run = RunState(run_id=run_id, config=config, trace=tx.inp.new_trace, started_ns=tx.inp.now_ns)
    prompts = [user_text(m["content"]) for m in messages if m["role"] == "user"]
    run.task = truncate(prompts[-1] if prompts else "", PROMPT_CHARS)
    run.last_prompt = run.task
    st.run = run
    st.status = "running"
    st.last_config = config
    st.runs += 1
    for m in messages:
        tx.add_message(m, source)
    # `config` (an addition) lets a session be rebuilt from its transcript with its settings.
    profile = get_profile(config.profile)
    run.profile_phase = profile.initial_phase
    ignored = {"ignored_fields": tx.inp.ignored_fields} if isinstance(tx.inp, StartInput) and tx.inp.ignored_fields \
        else {}
    tx.emit("run.started", f"run.started:{run_id}", run_id, profile=config.profile,
            config=config.model_dump(mode="json"), **_lineage(config), **ignored)
    unknown = tx.inp.unknown_tools if isinstance(tx.inp, StartInput) else []
    if unknown:
        tx.emit("warning", f"warning:{run_id}:unknown_tools", run_id, code="unknown_tools",
                message=f"no tool named {', '.join(unknown)} is known; the run goes on without "
                        f"{'it' if len(unknown) == 1 else 'them'}", tools=unknown)
    if profile.snapshots_workspace:
        run.workspace = render_workspace(workspace)
    if profile.planned:
        steps = planning.parse_plan(plan) if plan is not None else []
        if steps:  # a pre-built plan skips the plan phase
            run.plan = steps
            _phase(tx, run, "execute")
            _emit_spec(tx, run, planning.record(st, run, "start"), f"plan.updated:{run_id}:start")
    _request_generation(tx, run)
    return tx.finish()


def _lineage(config: RunConfig) -> dict[str, Any]:
    """`run.started` of a child run names its parent (additions)."""
    if config.subagent_depth == 0:
        return {}
    return {"parent_session_id": subagent.parent_of(config.metadata),
            "parent_tool_use_id": config.metadata.get(subagent.PARENT_TOOL_USE),
            "subagent_depth": config.subagent_depth}


def _phase(tx: _Tx, run: RunState, to: str) -> None:
    """Move the run to profile phase `to` (checked against the profile's table) and emit
    `phase.changed`."""
    _emit_spec(tx, run, change_phase(run, to, get_profile(run.config.profile).transitions), "")


def _to_review(tx: _Tx, run: RunState) -> None:
    """turn_by_turn: a proposal made after executing goes back to review (execute→review);
    one made in review stays there."""
    if run.profile_phase == "execute" and get_profile(run.config.profile).reviews_every_turn:
        _phase(tx, run, "review")


def _emit_spec(tx: _Tx, run: RunState, spec: Any, key: str) -> None:
    if spec.kind == "phase.changed":
        key = f"phase.changed:{run.run_id}:{run.phase_changes}"
    tx.emit(spec.kind, key, run.run_id, **spec.fields)


def _apply(tx: _Tx, run: RunState, step: NextStep, cfg: CoreConfig,
           schemas: dict[str, dict[str, Any]] | None = None) -> None:
    if isinstance(step, NextStepExecuteTools):
        _dispatch(tx, run, step.calls, schemas)
    elif isinstance(step, NextStepReview):
        _to_review(tx, run)
        fields = approval.open_checkpoint(tx.st, run, "proposal", [], [], {}, step.text)
        tx.emit("approval.requested", f"approval.requested:{fields['checkpoint_id']}", run.run_id, **fields)
    elif isinstance(step, NextStepRunAgain):
        for m in step.append:
            tx.add_message(m)
        if step.reason in ("vacuous_retry", "commitment_nudge"):
            tx.count(step.reason)
        _request_generation(tx, run, notes=step.notes)
    elif isinstance(step, NextStepConverge):
        for m in step.append:
            tx.add_message(m)
        run.converging, run.converge_reason = step.status, step.reason
        _request_generation(tx, run, notes=step.notes)
    elif step.status == "completed" and not get_profile(run.config.profile).single_generation \
            and step.conclusion is None and run.profile_phase != "done" and (tx.st.steering or tx.st.queued):
        limit = outer_limit(run, cfg) or ("max_turns" if run.turn >= run.config.max_turns else None)
        if limit is not None:
            # Follow-ups past the limit start the next run (_end_run), as on an idle session.
            _end_run(tx, "max_turns", step.text, cfg, reason=limit)
        else:
            _take_follow_ups(tx, run)
    else:
        _end_run(tx, step.status, step.text, cfg, error=step.error, reason=step.reason,
                 conclusion=step.conclusion)


def _take_follow_ups(tx: _Tx, run: RunState) -> None:
    """The outer boundary: follow-ups that arrived during the run are taken now, with the
    full history, instead of ending and starting a new run."""
    content = _drain_steering(tx.st) + _drain_queued(tx.st)
    tx.add_message({"role": "user", "content": content}, source="follow_up")
    run.outer += 1
    run.inner = 0
    run.last_prompt = truncate(user_text(content), PROMPT_CHARS)
    loop_detection.clear(run)
    _request_generation(tx, run)


def _request_generation(tx: _Tx, run: RunState, notes: list[str] | None = None) -> None:
    """Ask memory for the next generation. When a budget is exhausted, this generation is
    the converging one: no tools, a note asking for the best answer now."""
    notes = list(notes or [])
    if run.converging is None:
        exhausted = budget.exhausted(run)
        if exhausted is not None:
            run.converging, run.converge_reason = "budget_exhausted", exhausted
            notes.append(OUT_OF_BUDGET_NOTE if strategy_loop.finish_offered(run) else budget.FINAL_ANSWER_NOTE)
    profile = get_profile(run.config.profile)
    if profile.planned and run.converging is None:
        if run.profile_phase == "plan":
            notes.append(planning.plan_note(run, run.config.tools))
        elif run.profile_phase == "execute" and run.plan:
            notes.append(planning.status_note(run))
    elif profile.snapshots_workspace and run.workspace and run.tool_calls_made == 0 and run.converging is None:
        notes.append(run.workspace)  # the WorkspaceSnapshot, while nothing has run that could change it
    offer = strategy_loop.offer(run)
    run.awaiting = "generate"
    run.gen_seq += 1
    step_id = f"{run.run_id}:g{run.gen_seq}"
    run.pending_step = step_id
    cfg = run.config
    max_tokens = budget.max_tokens_for(run, cfg.max_tokens)
    # Cut short at a max_tokens the budget shrank, the run ends budget_exhausted (budget.end_cause).
    run.budget_capped = run.converging is None and max_tokens < cfg.max_tokens
    env = AssembleContext(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn + 1,
        history_len=tx.st.history_len, system=cfg.system, ephemeral_notes=notes,
        tools=offer.tools, offer_tools=offer.offer, extra_tools=offer.extra,
        models=cfg.models[run.model_offset:], max_tokens=max_tokens,
        temperature=run.temperature if run.temperature is not None else cfg.temperature,
        reduce_context=run.context_retries > 0, context_window=cfg.context_window,
        compaction_at_pct=cfg.compaction_at_pct, actor=cfg.actor, memory_model=cfg.memory_model, trace=run.trace,
        executor=spec_for(run),
    )
    tx.effects.append(PublishWork(target="memory.assemble", envelope=env.model_dump(mode="json"), model=env,
                                  msg_id=f"{step_id}:assemble"))


def _dispatch(tx: _Tx, run: RunState, calls: list[dict[str, Any]],
              schemas: dict[str, dict[str, Any]] | None) -> None:
    """The strategy loop after interpret (strategy_loop.py): validate (the plan gate),
    reserved tools answered by the core, preview (an approval checkpoint when a call
    needs one: the whole batch waits), else execute."""
    for c in calls:
        tx.emit("tool.call", f"tool.call:{c['id']}", run.run_id, turn=run.turn, tool_use_id=c["id"],
                name=c["name"], input=c.get("input", {}))
    rejected, reserved = strategy_loop.validate(run, calls, schemas)
    run.answered = []
    for n, c in enumerate(reserved):
        block, specs = planning.apply_update(tx.st, run, c, get_profile(run.config.profile).transitions)
        run.answered.append(block)
        tx.emit("tool.result", f"tool.result:{c['id']}", run.run_id, turn=run.turn, tool_use_id=c["id"],
                name=c["name"], is_error=bool(block.get("is_error")), content=block["content"])
        for m, spec in enumerate(specs):
            _emit_spec(tx, run, spec, f"{spec.kind}:{run.run_id}:t{run.turn}:{n}:{m}")
    ask = strategy_loop.preview(run, calls, rejected, reserved)
    if ask:
        _to_review(tx, run)
        fields = approval.open_checkpoint(tx.st, run, "tool_calls", calls, ask, rejected, run.last_text)
        tx.emit("approval.requested", f"approval.requested:{fields['checkpoint_id']}", run.run_id, **fields)
        return
    _execute(tx, run, calls, rejected)


def _execute(tx: _Tx, run: RunState, calls: list[dict[str, Any]], denied: dict[str, str]) -> None:
    """execute: the batch as one ExecuteTools step; calls in `denied` never reach a
    provider (the tools service answers them with the reason); calls the core answered
    (`run.answered`) are not sent at all."""
    run.awaiting = "tools"
    step_id = f"{run.run_id}:t{run.turn}"
    run.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    answered = {b["tool_use_id"]: b for b in run.answered}
    to_run = [c for c in calls if c["id"] not in answered]
    if not to_run:  # only reserved tools: nothing to wait for
        run.pending_step = None
        _after_batch(tx, run, [answered[c["id"]] for c in calls])
        return
    run.pending_step = step_id
    env = ExecuteTools(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn,
        calls=[ToolCall(tool_use_id=c["id"], name=c["name"], input=c.get("input") or {}) for c in to_run],
        denied={c["id"]: denied[c["id"]] for c in to_run if c["id"] in denied}, trace=run.trace,
    )
    tx.effects.append(PublishWork(target="tools.execute", envelope=env.model_dump(mode="json"), model=env,
                                  msg_id=f"{step_id}:execute"))


def _end_run(tx: _Tx, status: str, text: str | None, cfg: CoreConfig,
             error: tuple[str, str] | None = None, start_queued: bool = True,
             reason: str | None = None, conclusion: dict[str, Any] | None = None) -> None:
    st = tx.st
    run = st.run
    assert run is not None
    if error is not None:
        tx.emit("error", f"error:{run.run_id}:{status}", run.run_id, code=error[0], message=error[1],
                action="terminate")
    spent = budget.used_up(run) if status == "completed" else None
    if spent is not None:  # never `completed` over budget, however the run got here
        status, reason = "budget_exhausted", spent
    _close_dangling_tool_uses(tx, run, status)
    final_text = text if text is not None and text.strip() else run.last_text
    if conclusion is None:
        conclusion = technical_summary.stopped_conclusion(run, status, final_text,
                                                          strategy_loop.finish_offered(run))
    if not final_text.strip() and conclusion is not None:
        final_text = conclusion["summary"]  # never silently: the summary is the best answer left
    tx.emit("run.ended", f"run.ended:{run.run_id}", run.run_id, status=status, final_text=final_text,
            conclusion=conclusion, turns=run.turn,
            usage={"input_tokens": run.usage.total_input(), "output_tokens": run.usage.output_tokens},
            cost_usd=None if run.unpriced else round(run.cost_usd, 8), **({"reason": reason} if reason else {}))
    run.awaiting = "done"
    run.pending_step = None
    run.checkpoint = None
    st.run = None
    st.status = "idle"
    if start_queued and (st.queued or st.steering) and st.last_config is not None:
        # Follow-ups that arrived too late for the last boundary start the next run.
        content = _drain_steering(st) + _drain_queued(st)
        _start_run(tx, st.last_config, [{"role": "user", "content": content}], run_id=f"{run.run_id}.next",
                   cfg=cfg, source="follow_up")
    elif not start_queued:
        st.queued.clear()
        st.steering.clear()


def _close_dangling_tool_uses(tx: _Tx, run: RunState, status: str) -> None:
    """A run that ends after the model asked for tools leaves tool_use blocks without
    results; the Messages API rejects such a history, so each gets an error result."""
    if run.awaiting in ("tools", "approval") and run.pending_calls:
        calls = run.pending_calls
    else:
        calls = []
        if tx.append and tx.append[-1].get("role") == "assistant":
            calls = [{"id": b["id"], "name": b["name"]} for b in tx.append[-1].get("content", [])
                     if b.get("type") == "tool_use"]
    if calls:
        tx.add_message({"role": "user", "content": _batch_results(run, calls, f"not executed: the run ended ({status})")})
    run.pending_calls = []
    run.answered = []


def _batch_results(run: RunState, calls: list[dict[str, Any]], why: str) -> list[dict[str, Any]]:
    """Results for a batch that will not run: the core's own answers where it has them
    (reserved tools; the finish call that ended the run), else an error result `why`."""
    answered = {b["tool_use_id"]: b for b in run.answered}
    blocks = []
    for c in calls:
        if c["id"] in answered:
            blocks.append(answered[c["id"]])
        elif c["name"] == FINISH_TOOL:
            blocks.append({"type": "tool_result", "tool_use_id": c["id"], "content": FINISHED_RESULT})
        else:
            blocks.extend(not_executed([c], why))
    return blocks


def _account(tx: _Tx, run: RunState, result: GenerationResult, cfg: CoreConfig) -> None:
    """Usage is recorded once per generation, from the final message's usage (streaming
    reports cumulative usage; summing per-event figures would count tokens many times)."""
    # An external agent's step holds all its own model calls (result.turns).
    run.turn += max(1, result.turns)
    run.inner += 1
    tx.st.turns += max(1, result.turns)
    run.last_context_tokens = result.usage.total_input() + result.usage.output_tokens
    _add_usage(tx, run, result, result.usage, "turn", cfg, reported_cost=result.cost_usd)


def _add_usage(tx: _Tx, run: RunState, result: GenerationResult, usage: Usage, count: str, cfg: CoreConfig,
               model: str | None = None, reported_cost: float | None = None) -> None:
    """Add `usage` to the run's and the session's ledger (with its cost, at `model`'s price,
    by default the generation's, or as an external agent reported it) and count it."""
    run.usage = run.usage + usage
    tx.st.usage = tx.st.usage + usage
    model = model or result.model or run.config.models[run.model_offset]
    if reported_cost is not None:
        cost: float | None = reported_cost
    else:
        price = price_for(model, cfg.prices)
        cost = None if price is None else cost_at(price, usage)
    if cost is None:
        _unpriced(tx, run, model)
    else:
        run.cost_usd += cost
        tx.st.cost_usd += cost
    tx.count(count, {"profile": run.config.profile, "model": model},
             input_tokens=usage.total_input(), output_tokens=usage.output_tokens, cost_usd=cost or 0.0)


def _unpriced(tx: _Tx, run: RunState, model: str) -> None:
    """A model with no known price makes the run's cost unknown (null, not a made-up 0);
    the first time per run and model a `warning` says so (loopwire's own offline models
    have no price by design and need no warning)."""
    tx.st.cost_unknown = True
    if model in run.unpriced:
        return
    run.unpriced.append(model)
    if not is_offline_model(model):
        tx.emit("warning", f"warning:{run.run_id}:unknown_price:{model}", run.run_id, code="unknown_price",
                message=f"no price is known for model {model}: the run's cost_usd is null "
                        "(LOOPWIRE_PRICES can give it one)")


def _account_extra(tx: _Tx, run: RunState, result: GenerationResult, cfg: CoreConfig) -> None:
    """Tokens memory spent on this step besides the model call (its summaries), reported
    once with the step's result, whether the call succeeded or not."""
    if result.extra_usage is not None:
        _add_usage(tx, run, result, result.extra_usage, "extra_usage", cfg, model=result.extra_model)


# -- helpers ----------------------------------------------------------------------------------
def _mode(run: RunState) -> str:
    return "tools" if get_profile(run.config.profile).offers_tools and run.config.tools != [] else "chat"


def _text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", []) if b.get("type") == "text")


def _drain_steering(st: SessionState) -> list[dict[str, Any]]:
    """Steering messages kept by state written before steering applied at once."""
    blocks = [b for m in st.steering for b in m["content"]]
    st.steering = []
    return blocks


def _drain_queued(st: SessionState) -> list[dict[str, Any]]:
    blocks = [b for m in st.queued for b in m["content"]]
    st.queued = []
    return blocks


def _run_config(body: StartRun, cfg: CoreConfig, strategy: StrategyConfig | None = None,
                depth: int = 0) -> RunConfig:
    """The run's settings: StartRun's, over the strategy config's (strategy.py), over the
    profile's defaults."""
    profile = get_profile(body.profile)
    models = [body.model.primary or cfg.default_model, *body.model.fallbacks]
    base = strategy.limits if strategy is not None else Limits()
    limits = {name: getattr(body.limits, name) if getattr(body.limits, name) is not None else getattr(base, name)
              for name in Limits.model_fields}
    return RunConfig(
        profile=body.profile, system=strategy.system_prompt(body.system) if strategy else body.system,
        models=models, max_tokens=body.model.max_tokens or cfg.default_max_tokens,
        temperature=body.model.temperature, memory_model=body.model.memory or cfg.memory_model,
        tools=narrow_tools(strategy.tools if strategy else None, body.tools),
        tool_permissions=merge_permissions(cfg.tool_policy, strategy.tool_permissions if strategy else {},
                                           body.tool_permissions),
        max_turns=limits["max_turns"] or profile.max_turns,
        max_total_tokens=limits["max_total_tokens"], max_cost_usd=limits["max_cost_usd"],
        context_window=limits["context_window"] or 200_000,
        compaction_at_pct=limits["compaction_at_pct"] or profile.compaction_at_pct,
        actor=body.strategy.actor, expectation=body.strategy.expectation,
        strategy=strategy.name if strategy else None, subagent_depth=depth, metadata=body.metadata,
        executor_agent=body.executor.agent if body.executor else None,
    )


def _input_messages(body: StartRun) -> list[dict[str, Any]]:
    if isinstance(body.input, str):
        return [{"role": "user", "content": text_to_content(body.input)}]
    return [{"role": m.role, "content": text_to_content(m.content)} for m in body.input]


_HANDLERS: dict[type, Any] = {
    StartInput: _on_start,
    MessageInput: _on_message,
    SteerInput: _on_steer,
    AbortInput: _on_abort,
    DecisionInput: _on_decision,
    GenerationInput: _on_generation,
    ToolsInput: _on_tools,
    UndeliverableInput: _on_undeliverable,
    PermissionInput: _on_permission,
}
