"""The router's core: `decide(state, input) -> Decision`, with no I/O.

The shell (shell/service.py) loads the session, calls `decide`, commits the new state and the
history it appends in one compare-and-set, then performs the effects. Everything the run
does is visible as data: which messages join the history, which events are emitted,
which work is published, which notices are sent, and what the shell should count.
`decide` never changes the state it is given (transition.py makes the working copy),
reads no clock, no environment and no settings: what it needs arrives in the input (the
shell's lookups, a fresh id, the time) and in `CoreConfig` (config.py).

This module reads top to bottom: redeliveries and replays first, then one handler per
input. What the handlers do is in the modules beside it:

- transition.py: the working copy of one transition, and the `Decision` it ends with;
- run_config.py: a run's settings merged from StartRun, its strategy config, the
  profile and the operator's defaults;
- run_lifecycle.py: a run's start (`run.started`) and its end (`run.ended`);
- step_requests.py: the next generation;
- tool_batches.py: the tool batches through the strategy loop, and what their results lead to;
- call_reports.py: every call's `tool.result`, as it finishes or with its batch's result;
- turn_resolution.py: a finished turn through the profile's stages to its next step, and
  that step carried out;
- accounting.py: the ledger of usage and cost;
- follow_ups.py: steering now, follow-ups at the outer boundary;
- history_repair.py: every tool_use block gets its result.

The rules they apply have modules of their own: budget.py, the limits and the progress note
(tool_batches.py), loop_detection.py, stages.py (vacuous answers, the commitment gate, routing),
error_policy.py; the profiles (profiles.py, phases.py, docs/profiles.md), the plan gate
and preview (strategy_loop.py), approval checkpoints (approval.py), the finish tool
(finish.py), agentic_planned's phases (planning.py), strategy configs (strategy.py),
subagent depth (subagent.py) and the operator's tool policy (tool_policy.py).
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import GenerationResult, ToolsResult
from loopwire.shared.contract.event_fields import ErrorFields, ModelFallbackFields
from loopwire.shared.contract.messages import Message, message_text, tool_result_block
from loopwire.shared.contract.protocol import text_to_content
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from . import approval, budget, follow_ups, subagent, tenant_quotas
from .accounting import account
from .admission import admit, dequeue, steer_waiting
from .call_reports import on_call_finished, unreported_events
from .config import CoreConfig
from .effects import EmitEvent, PublishNotice
from .error_policy import classify_generation_failure
from .executor_profiles import decide_permission, is_executor, open_permission, settle_permission
from .inputs import (
    AbortInput,
    AdmissionInput,
    BaseInput,
    CallFinishedInput,
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
from .profiles import PROFILES, Profile
from .run_config import input_messages, run_config
from .run_lifecycle import end_run, new_run
from .stages import Turn
from .state import RECENT_INPUTS
from .steering import steering_fields
from .step_requests import move_phase, request_generation
from .strategy import StrategyConfig
from .tool_batches import after_batch, execute
from .transition import Count, Decision, Transition, reject, replay
from .turn_resolution import take_turn

__all__ = ["CoreConfig", "Count", "Decision", "decide"]

UNDELIVERABLE = "undeliverable"


def decide(state: SessionState, inp: BaseInput, cfg: CoreConfig = CoreConfig()) -> Decision:
    """The next state and the effects for `inp`; `state` is left as it was."""
    if inp.ingress_seq and inp.ingress_seq <= state.ingress_seq:
        # Applied already, in stream order: by this replica before a crash, or by another
        # one as the backlog of a later input. The replica it was delivered to holds it
        # unacked until the work it started is surely out, so that one performs the
        # session's current outbox again (it keeps the work in flight:
        # Transition._work_in_flight); a replica that only read it from the stream leaves it alone.
        if inp.backlog:
            return Decision(state=None)
        return replay(state, of_later_input=state.outbox_input != inp.input_id)
    if state.outbox_input == inp.input_id:
        return replay(state)  # the latest input again: its effects may not have gone out
    if inp.input_id in state.recent_inputs:
        return replay(state) if inp.recover else Decision(state=None)
    if isinstance(inp, RejectedInput):
        return _settled(state, inp, reject(state, inp, inp.code, message=inp.message))
    handled = _HANDLERS[type(inp)](Transition(state, inp), inp, cfg)
    if handled is None:
        late = unreported_events(state, inp)  # owed even by a result the run moved past
        decision = replay(state) if inp.recover else Decision(state=None)
        decision.effects[:0] = late
        return decision
    if cfg.tenant_limits is not None:  # no tenant limits configured: no tenant's keys to settle
        tenant_quotas.add_quota_effects(state, handled, now_ns=inp.now_ns, cfg=cfg)
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


# -- ingress ------------------------------------------------------------------------------
def _on_start(tx: Transition, inp: StartInput, cfg: CoreConfig) -> Decision:
    body = inp.body
    profile = PROFILES[body.profile]
    if inp.workspace_refusal is not None:
        return reject(tx.st, inp, "workspace_not_allowed", message=inp.workspace_refusal)
    if tx.st.tool_recording is not None and profile.executor is not None:
        return reject(tx.st, inp, "replay_unsupported",
                      message=f"session {tx.st.session_id} answers tool calls from the recording of "
                      f"{tx.st.tool_recording}; an external agent's own tools cannot be: profile '{body.profile}' "
                      "cannot run here")
    if tx.st.status != "idle":
        return reject(tx.st, inp, "session_busy",
                      message=f"session {tx.st.session_id} already has an active run; publish `message` to "
                      "follow up or `abort` it first")
    parent = inp.parent_session_id or subagent.parent_of(body.metadata)
    recorded = tx.st.last_config.subagent_depth if tx.st.last_config else 0
    depth = subagent.child_depth(body.metadata, parent, parent_depth=inp.parent_depth, recorded_depth=recorded)
    if depth > cfg.max_subagent_depth:
        return reject(tx.st, inp, "subagent_depth_exceeded",
                      message=f"a child run at subagent depth {depth} is deeper than the limit "
                      f"({cfg.max_subagent_depth}, LOOPWIRE_MAX_SUBAGENT_DEPTH)")
    strategy = StrategyConfig.model_validate(inp.strategy) if inp.strategy else None
    config = run_config(body, cfg, strategy=strategy, depth=depth)
    agent_reports_cost = PROFILES[config.profile].executor is not None
    if (unpriced := budget.unpriced_model(config, cfg.prices, agent_reports_cost=agent_reports_cost)) is not None:
        return reject(tx.st, inp, budget.UNPRICED_MODEL, model=unpriced,
                      message=f"limits.max_cost_usd cannot be counted: no price is known for model {unpriced} "
                      "(the built-in table and LOOPWIRE_PRICES); give it a price in LOOPWIRE_PRICES or start "
                      "without max_cost_usd. No run started")
    if parent is not None and subagent.parent_of(config.metadata) != parent:
        config.metadata = {**config.metadata, subagent.PARENT_SESSION: parent}
    config.workspace_path = inp.workspace_path
    return new_run(tx, inp, cfg, messages=input_messages(body), source="input", config=config, plan=body.plan,
                   workspace=inp.workspace)


def _on_message(tx: Transition, inp: MessageInput, cfg: CoreConfig) -> Decision:
    """A follow-up: starts a run on an idle session, else waits for the outer boundary."""
    user: Message = {"role": "user", "content": text_to_content(inp.body.content)}
    if tx.st.status == "idle":
        return new_run(tx, inp, cfg, messages=[user], source="follow_up")
    tx.st.queued.append(user)
    return tx.finish()


def _on_steer(tx: Transition, inp: SteerInput, cfg: CoreConfig) -> Decision:
    """Steering applies now, even mid-step (follow_ups.steer), and a new generation is
    requested; on an idle session it starts a run, as a follow-up does."""
    content = text_to_content(inp.body.content)
    run = tx.st.run
    if tx.st.waiting is not None:
        return steer_waiting(tx, content)
    if tx.st.status == "idle" or run is None:
        return new_run(tx, inp, cfg, messages=[{"role": "user", "content": content}], source="steer")
    follow_ups.steer(tx, run, content)
    request_generation(tx, run, PROFILES[run.config.profile])
    return tx.finish()


def _on_abort(tx: Transition, inp: AbortInput, cfg: CoreConfig) -> Decision:
    run = tx.st.run
    if tx.st.waiting is not None:
        return dequeue(tx, inp.body.reason)
    if run is None:
        return reject(tx.st, inp, "no_active_run", message=f"session {tx.st.session_id} has no active run to abort")
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))
    # Input queued during the run outlives it: it starts the next run, as after any end.
    end_run(tx, "aborted", None, cfg=cfg, reason=inp.body.reason)
    return tx.finish()


def _on_decision(tx: Transition, inp: DecisionInput, cfg: CoreConfig) -> Decision:
    """The answer to the open checkpoint (approval.py): the run goes on from the stored
    checkpoint, with no new model call."""
    body = inp.body
    cp = approval.open_for(tx.st, body.checkpoint_id)
    run = tx.st.run
    if cp is None or run is None:
        return reject(tx.st, inp, "unknown_checkpoint",
                      message=f"checkpoint {body.checkpoint_id} is unknown or already answered")
    tx.emit("approval.decided", message_ids.event_key("approval.decided", cp.id), run.run_id, approval.decided_fields(cp, body))
    if cp.kind == "executor":  # the agent waits for it in its step (executor_profiles.py)
        tx.effects.extend(decide_permission(tx.st, run, cp, body=body))
        return tx.finish()
    approval.close(tx.st, run)
    approved = body.decision == "approve"
    profile = PROFILES[run.config.profile]
    if cp.kind == "proposal":
        if approved:  # the approved answer is carried out: it is the run's answer
            move_phase(tx, run, "execute", profile=profile)
            end_run(tx, "completed", None, cfg=cfg, closing=cp.text)  # the approved answer; execute -> done
        else:
            move_phase(tx, run, "review", profile=profile)  # another round of review
            tx.add_message(approval.proposal_denied_message(body.note))
            request_generation(tx, run, profile)
        return tx.finish()
    denied = dict(cp.rejected)
    if not approved:
        denied.update(approval.user_denials(cp, body.note))
    if run.profile_phase == "review":
        move_phase(tx, run, "execute" if approved else "review", profile=profile)
    execute(tx, run, cp.calls, profile=profile, denied=denied, cfg=cfg)
    return tx.finish()


def _on_permission(tx: Transition, inp: PermissionInput, cfg: CoreConfig) -> Decision:
    """An external agent asks before running an `approve` tool, its step in flight."""
    run = tx.st.run
    if run is None or run.pending_step != inp.request.step_id:
        return Decision(state=None)  # stale: the step was abandoned (its agent is stopped)
    changed, effects = open_permission(tx.st, run, inp.request)
    if not changed:
        return Decision(state=None, effects=effects)
    tx.effects.extend(effects)
    return tx.finish()


def _on_undeliverable(tx: Transition, inp: UndeliverableInput, cfg: CoreConfig) -> Decision | None:
    """Work that will not be done: the run it belongs to ends `failed` (its best answer so
    far, dangling tool calls answered), the session is idle and takes new input (queued
    follow-ups start the next run). Work of a run that already ended only leaves the error."""
    run = tx.st.run
    message = f"{inp.what or 'work'} could not be delivered: {inp.reason or 'gave up'}"
    if run is None or inp.run_id is None or run.run_id != inp.run_id:
        if inp.run_id is None:  # ingress: the client's input was not applied
            return reject(tx.st, inp, UNDELIVERABLE, message=message)
        return None
    if inp.step_id is not None and run.pending_step != inp.step_id:
        return None  # the watchdog's step was answered since it looked
    tx.effects.append(PublishNotice(notice="cancel", body={"run_id": run.run_id}))  # whatever still runs
    end_run(tx, "failed", None, cfg=cfg, error=(UNDELIVERABLE, message), reason=UNDELIVERABLE)
    return tx.finish()


def _stalled(tx: Transition, run: RunState, cfg: CoreConfig) -> Decision | None:
    """A step's result that comes after the session stood still longer than the stall
    limit (an outage longer than the tolerance, say) ends the run as the watchdog would
    have: `failed`, `undeliverable`. Which of the two comes first after such an outage
    must not decide how the run ends."""
    since, now = tx.st.changed_ns, tx.inp.now_ns
    idle_s = (now - since) / 1e9 if since and now else 0.0
    if not cfg.stall_after_s or idle_s <= cfg.stall_after_s:
        return None  # the common case, decided without looking further
    if is_executor(run.config.profile) and idle_s <= cfg.executor_stall_after_s:
        return None
    return _on_undeliverable(tx, UndeliverableInput(
        input_id=tx.inp.input_id, run_id=run.run_id, step_id=run.pending_step, what=f"step {run.pending_step}",
        reason=f"no progress for {idle_s:.0f} s (longer than the outage tolerance and the longest step)"), cfg)


# -- step results -------------------------------------------------------------------------
def _on_generation(tx: Transition, inp: GenerationInput, cfg: CoreConfig) -> Decision | None:
    result: GenerationResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None  # stale: the run ended or moved on (abort, steer) while this was in flight
    if (stalled := _stalled(tx, run, cfg)) is not None:
        return stalled
    run.pending_step = None
    profile = PROFILES[run.config.profile]  # resolved once: the stages and every rule below read it
    if profile.executor is not None:  # only an external agent's step asks for permissions
        settle_permission(tx.st, run)
    ledgered = account(tx, run, result, cfg=cfg)
    if ledgered is None or result.message is None:
        _on_failed_generation(tx, run, result, profile=profile, cfg=cfg)
        return tx.finish()

    message = result.message
    text = message_text(message)
    tool_calls = [b for b in message.get("content", []) if not isinstance(b, str) and b.get("type") == "tool_use"]
    events = [EmitEvent(kind="message", key=message_ids.event_key("message", result.step_id), run_id=run.run_id,
                        fields={"turn": run.turn, "message": message, "model": result.model,
                                "stop_reason": result.stop_reason,
                                "usage": {"input_tokens": ledgered.input_tokens,
                                          "output_tokens": ledgered.output_tokens,
                                          # (read here, not through Usage.cache_fields: one file less per turn)
                                          "cache_read_input_tokens": result.usage.cache_read_input_tokens,
                                          "cache_creation_input_tokens": result.usage.cache_creation_input_tokens}})]
    for warning in ledgered.budget_warnings:
        run.budget.warned.append(warning["limit"])
        events.append(EmitEvent(kind="budget.warning", key=message_ids.event_key("budget.warning", run.run_id, warning["limit"]),
                                run_id=run.run_id, fields=warning))

    mode = "tools" if profile.offers_tools and run.config.tools != [] else "chat"
    turn = Turn(session=tx.st, run=run, message=message, stop_reason=result.stop_reason, text=text,
                tool_calls=tool_calls, mode=mode, config=cfg, step_id=result.step_id, transitions=profile.transitions)
    take_turn(tx, turn, profile=profile, schemas=inp.tool_schemas, events=events)
    return tx.finish()


def _on_failed_generation(tx: Transition, run: RunState, result: GenerationResult, *, profile: Profile,
                          cfg: CoreConfig) -> None:
    """A failed generation, by the error policy's verdict: the run ends, or the generation
    is asked for again (as it was, with a reduced context, or of the next model)."""
    verdict = classify_generation_failure(result.error, run, cfg)
    if verdict.action == "terminate":
        status = run.limits.converging or "failed"
        end_run(tx, status, None, cfg=cfg, error=(verdict.code, verdict.message),
                reason=run.limits.converge_reason if run.limits.converging else verdict.code)
        return
    tx.emit("error", message_ids.event_key("error", result.step_id), run.run_id,
            ErrorFields(code=verdict.code, message=verdict.message, action=verdict.action))
    if verdict.action == "continue":
        run.limits.step_retries += 1
    elif verdict.action == "retry_reduced_context":
        run.limits.context_retries += 1
        tx.emit("steering", message_ids.event_key("steering", result.step_id), run.run_id,
                steering_fields(run, "retry_reduced_context", reason=verdict.code))
    else:  # switch_model
        models = run.config.models
        tx.emit("model.fallback", f"model.fallback:{result.step_id}", run.run_id,
                ModelFallbackFields(from_model=models[run.limits.model_offset],
                                    to_model=models[run.limits.model_offset + 1], reason=verdict.code))
        run.limits.model_offset += 1
        tx.emit("steering", message_ids.event_key("steering", result.step_id), run.run_id,
                steering_fields(run, "model_switch", reason=verdict.code, to_model=models[run.limits.model_offset]))
    request_generation(tx, run, profile)


def _on_tools(tx: Transition, inp: ToolsInput, cfg: CoreConfig) -> Decision | None:
    result: ToolsResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None
    if (stalled := _stalled(tx, run, cfg)) is not None:
        return stalled
    tx.effects.extend(unreported_events(tx.st, inp))
    run.tools.reported = []
    run.pending_step = None
    by_id = {r.tool_use_id: r for r in result.results}
    answered = {b["tool_use_id"]: b for b in run.tools.answered}
    blocks = []
    for call in run.tools.pending_calls:
        item = by_id.get(call["id"])
        if call["id"] in answered:
            blocks.append(answered[call["id"]])  # a reserved tool, answered by the core
        elif item is None:
            blocks.append(tool_result_block(call["id"], "no result was returned for this call", is_error=True))
        else:
            # an error result is a result: the model adapts
            blocks.append(tool_result_block(item.tool_use_id, item.content, is_error=item.is_error))
    after_batch(tx, run, blocks, profile=PROFILES[run.config.profile], cfg=cfg)
    return tx.finish()


_HANDLERS: dict[type, Any] = {
    StartInput: _on_start,
    MessageInput: _on_message,
    SteerInput: _on_steer,
    AbortInput: _on_abort,
    DecisionInput: _on_decision,
    GenerationInput: _on_generation,
    ToolsInput: _on_tools,
    CallFinishedInput: on_call_finished,
    UndeliverableInput: _on_undeliverable,
    PermissionInput: _on_permission,
    AdmissionInput: admit,
}
