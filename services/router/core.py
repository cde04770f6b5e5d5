"""The router's core: `decide(state, input) -> Decision`, with no I/O.

The shell (service.py) loads the session, calls `decide`, commits the new state and the
history it appends in one compare-and-set, then performs the effects. Everything the run
does is visible here as data: which messages join the history, which events are emitted,
which work is published.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract import StartRun, text_to_content
from loopwire.shared.envelopes import AssembleContext, ExecuteTools, GenerationResult, ToolCall, ToolsResult
from loopwire.shared.pricing import cost_usd

from . import inputs as i
from .effects import Effect, EmitEvent, PublishWork, effect_from_dict
from .next_step import NextStep, NextStepExecuteTools, NextStepFinalOutput, NextStepRunAgain
from .profiles import get_profile
from .stages import Turn
from .state import RECENT_INPUTS, RunConfig, RunState, SessionState


@dataclass(frozen=True)
class CoreConfig:
    default_model: str = "claude-sonnet-4-5"
    default_max_tokens: int = 4096


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


class _Tx:
    """The working copy of one transition."""

    def __init__(self, state: SessionState, inp: i._Input) -> None:
        self.st = state.model_copy(deep=True)
        self.history_len_before = state.history_len
        self.inp = inp
        self.effects: list[Effect] = []
        self.append: list[dict[str, Any]] = []

    def emit(self, kind: str, key: str, run_id: str | None, **fields: Any) -> None:
        self.effects.append(EmitEvent(kind=kind, key=key, run_id=run_id, fields=fields))

    def add_message(self, message: dict[str, Any]) -> None:
        self.append.append(message)
        self.st.history_len += 1

    def finish(self) -> Decision:
        st = self.st
        st.recent_inputs = (st.recent_inputs + [self.inp.input_id])[-RECENT_INPUTS:]
        st.outbox = [e.model_dump(mode="json") for e in self.effects]
        st.outbox_input = self.inp.input_id
        return Decision(state=st, effects=self.effects, append=self.append,
                        history_len_before=self.history_len_before)


def decide(state: SessionState, inp: i._Input, cfg: CoreConfig = CoreConfig()) -> Decision:
    if inp.input_id in state.recent_inputs:
        if state.outbox_input == inp.input_id:
            return Decision(state=None, effects=[effect_from_dict(e) for e in state.outbox], replay=True)
        return Decision(state=None)
    if isinstance(inp, i.RejectedInput):
        return _reject(state, inp, inp.code, inp.message)
    tx = _Tx(state, inp)
    handled = _HANDLERS[type(inp)](tx, inp, cfg)
    if handled is None:
        return Decision(state=None)
    return handled


def _reject(state: SessionState, inp: i._Input, code: str, message: str) -> Decision:
    """An `error` event on the session and nothing else: no state is created or changed."""
    run_id = state.run.run_id if state.run else None
    return Decision(state=None, effects=[EmitEvent(kind="error", key=f"error:{inp.input_id}", run_id=run_id,
                                                   fields={"code": code, "message": message})])


# -- ingress ------------------------------------------------------------------------------
def _on_start(tx: _Tx, inp: i.StartInput, cfg: CoreConfig) -> Decision:
    body = inp.body
    profile = get_profile(body.profile)
    if not profile.implemented:
        return _reject(tx.st, inp, "unsupported_profile",
                       f"profile '{body.profile}' is part of the contract but not available in this "
                       "version; use 'agentic' or 'conversational'")
    if tx.st.status != "idle":
        return _reject(tx.st, inp, "session_busy",
                       f"session {tx.st.session_id} already has an active run; publish `message` to "
                       "follow up or `abort` it first")
    config = _run_config(body, cfg)
    messages = _input_messages(body)
    return _start_run(tx, config, messages, run_id=inp.new_id)


def _on_message(tx: _Tx, inp: i.MessageInput | i.SteerInput, cfg: CoreConfig) -> Decision:
    user = {"role": "user", "content": text_to_content(inp.body.content)}
    if tx.st.status == "idle":
        config = tx.st.last_config or _run_config(StartRun(input="-"), cfg)
        return _start_run(tx, config, [user], run_id=inp.new_id)
    if isinstance(inp, i.SteerInput):
        tx.st.steering.append(user)
    else:
        tx.st.queued.append(user)
    return tx.finish()


def _on_abort(tx: _Tx, inp: i.AbortInput, cfg: CoreConfig) -> Decision:
    run = tx.st.run
    if run is None:
        return _reject(tx.st, inp, "no_active_run", f"session {tx.st.session_id} has no active run to abort")
    _end_run(tx, "aborted", None, cfg, start_queued=False, reason=inp.body.reason)
    return tx.finish()


def _on_decision(tx: _Tx, inp: i.DecisionInput, cfg: CoreConfig) -> Decision:
    return _reject(tx.st, inp, "unknown_checkpoint",
                   f"checkpoint {inp.body.checkpoint_id} is unknown or already answered")


# -- step results -------------------------------------------------------------------------
def _on_generation(tx: _Tx, inp: i.GenerationInput, cfg: CoreConfig) -> Decision | None:
    result: GenerationResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None  # stale: the run ended or moved on (abort, steer) while this was in flight
    run.pending_step = None
    if not result.ok or result.message is None:
        err = result.error
        code, message = (err.code, err.message) if err else ("model_error", "the model call failed")
        _end_run(tx, "failed", None, cfg, error=(code, message))
        return tx.finish()

    _account(tx, run, result)
    message = result.message
    text = _text_of(message)
    tool_calls = [b for b in message.get("content", []) if b.get("type") == "tool_use"]
    if message.get("content"):
        tx.add_message(message)
    if text.strip():
        run.last_text = text
    tx.emit("message", f"message:{result.step_id}", run.run_id, turn=run.turn, message=message,
            model=result.model, stop_reason=result.stop_reason,
            usage={"input_tokens": result.usage.total_input(), "output_tokens": result.usage.output_tokens})

    profile = get_profile(run.config.profile)
    turn = Turn(session=tx.st, run=run, message=message, stop_reason=result.stop_reason, text=text,
                tool_calls=tool_calls, mode=_mode(run))
    step: NextStep | None = None
    for stage in profile.stages:
        step = stage.after_generation(turn)
        if step is not None:
            break
    if step is None:
        step = NextStepFinalOutput(status="completed", text=text)
    _apply(tx, run, step, cfg)
    return tx.finish()


def _on_tools(tx: _Tx, inp: i.ToolsInput, cfg: CoreConfig) -> Decision | None:
    result: ToolsResult = inp.result
    run = tx.st.run
    if run is None or run.pending_step != result.step_id:
        return None
    run.pending_step = None
    by_id = {r.tool_use_id: r for r in result.results}
    blocks = []
    for call in run.pending_calls:
        item = by_id.get(call["id"])
        if item is None:
            blocks.append({"type": "tool_result", "tool_use_id": call["id"], "is_error": True,
                           "content": "no result was returned for this call"})
        else:
            blocks.append(item.as_block())
    run.pending_calls = []
    content: list[dict[str, Any]] = blocks + _drain_steering(tx.st)
    tx.add_message({"role": "user", "content": content})
    _request_generation(tx, run)
    return tx.finish()


# -- transitions ----------------------------------------------------------------------------
def _start_run(tx: _Tx, config: RunConfig, messages: list[dict[str, Any]], run_id: str) -> Decision:
    st = tx.st
    run = RunState(run_id=run_id, config=config)
    st.run = run
    st.status = "running"
    st.last_config = config
    st.runs += 1
    for m in messages:
        tx.add_message(m)
    tx.emit("run.started", f"run.started:{run_id}", run_id, profile=config.profile)
    _request_generation(tx, run)
    return tx.finish()


def _apply(tx: _Tx, run: RunState, step: NextStep, cfg: CoreConfig) -> None:
    if isinstance(step, NextStepExecuteTools):
        _request_tools(tx, run, step.calls)
    elif isinstance(step, NextStepRunAgain):
        for m in step.append:
            tx.add_message(m)
        _request_generation(tx, run, notes=step.notes)
    elif step.status == "completed" and not get_profile(run.config.profile).single_generation \
            and (tx.st.steering or tx.st.queued):
        # The outer boundary: follow-ups that arrived during the run are taken now, with
        # the full history, instead of ending and starting a new run.
        content = _drain_steering(tx.st) + _drain_queued(tx.st)
        tx.add_message({"role": "user", "content": content})
        _request_generation(tx, run)
    else:
        _end_run(tx, step.status, step.text, cfg, error=step.error)


def _request_generation(tx: _Tx, run: RunState, notes: list[str] | None = None) -> None:
    run.phase = "generate"
    step_id = f"{run.run_id}:g{run.turn + 1}"
    run.pending_step = step_id
    cfg = run.config
    profile = get_profile(cfg.profile)
    env = AssembleContext(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn + 1,
        history_len=tx.st.history_len, system=cfg.system, ephemeral_notes=notes or [],
        tools=cfg.tools, offer_tools=profile.offers_tools and cfg.tools != [],
        models=cfg.models, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
    )
    tx.effects.append(PublishWork(target="memory.assemble", envelope=env.model_dump(mode="json"),
                                  msg_id=f"{step_id}:assemble"))


def _request_tools(tx: _Tx, run: RunState, calls: list[dict[str, Any]]) -> None:
    run.phase = "tools"
    step_id = f"{run.run_id}:t{run.turn}"
    run.pending_step = step_id
    run.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    denied: dict[str, str] = {}
    allowed = run.config.tools
    for c in calls:
        tx.emit("tool.call", f"tool.call:{c['id']}", run.run_id, turn=run.turn, tool_use_id=c["id"],
                name=c["name"], input=c.get("input", {}))
        permission = run.config.tool_permissions.get(c["name"], "auto")
        if allowed is not None and c["name"] not in allowed:
            denied[c["id"]] = f"tool '{c['name']}' is not available in this run"
        elif permission == "deny":
            denied[c["id"]] = f"tool '{c['name']}' is denied by the run's tool_permissions"
        elif permission == "approve":
            denied[c["id"]] = (f"tool '{c['name']}' requires approval, and approval checkpoints are not "
                               "available in this version")
    env = ExecuteTools(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn,
        calls=[ToolCall(tool_use_id=c["id"], name=c["name"], input=c.get("input") or {}) for c in calls],
        denied=denied,
    )
    tx.effects.append(PublishWork(target="tools.execute", envelope=env.model_dump(mode="json"),
                                  msg_id=f"{step_id}:execute"))


def _end_run(tx: _Tx, status: str, text: str | None, cfg: CoreConfig,
             error: tuple[str, str] | None = None, start_queued: bool = True,
             reason: str | None = None) -> None:
    st = tx.st
    run = st.run
    assert run is not None
    if error is not None:
        tx.emit("error", f"error:{run.run_id}:{status}", run.run_id, code=error[0], message=error[1])
    _close_dangling_tool_uses(tx, run, status)
    final_text = text if text is not None and text.strip() else run.last_text
    tx.emit("run.ended", f"run.ended:{run.run_id}", run.run_id, status=status, final_text=final_text,
            conclusion=None, turns=run.turn,
            usage={"input_tokens": run.usage.total_input(), "output_tokens": run.usage.output_tokens},
            cost_usd=round(run.cost_usd, 8), **({"reason": reason} if reason else {}))
    run.phase = "done"
    run.pending_step = None
    st.run = None
    st.status = "idle"
    if start_queued and (st.queued or st.steering) and st.last_config is not None:
        # Follow-ups that arrived too late for the last boundary start the next run.
        content = _drain_steering(st) + _drain_queued(st)
        _start_run(tx, st.last_config, [{"role": "user", "content": content}], run_id=f"{run.run_id}.next")
    elif not start_queued:
        st.queued.clear()
        st.steering.clear()


def _close_dangling_tool_uses(tx: _Tx, run: RunState, status: str) -> None:
    """A run that ends after the model asked for tools leaves tool_use blocks without
    results; the Messages API rejects such a history, so each gets an error result."""
    if run.phase == "tools" and run.pending_calls:
        calls = run.pending_calls
    else:
        calls = []
        if tx.append and tx.append[-1].get("role") == "assistant":
            calls = [{"id": b["id"], "name": b["name"]} for b in tx.append[-1].get("content", [])
                     if b.get("type") == "tool_use"]
    if calls:
        tx.add_message({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "is_error": True,
             "content": f"not executed: the run ended ({status})"} for c in calls]})
    run.pending_calls = []


def _account(tx: _Tx, run: RunState, result: GenerationResult) -> None:
    """Usage is recorded once per generation, from the final message's usage (streaming
    reports cumulative usage; summing per-event figures would count tokens many times)."""
    run.turn += 1
    tx.st.turns += 1
    run.usage = run.usage + result.usage
    tx.st.usage = tx.st.usage + result.usage
    cost = cost_usd(result.model or run.config.models[0], result.usage)
    run.cost_usd += cost
    tx.st.cost_usd += cost


# -- helpers ----------------------------------------------------------------------------------
def _mode(run: RunState) -> str:
    return "tools" if get_profile(run.config.profile).offers_tools and run.config.tools != [] else "chat"


def _text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", []) if b.get("type") == "text")


def _drain_steering(st: SessionState) -> list[dict[str, Any]]:
    blocks = [b for m in st.steering for b in m["content"]]
    st.steering = []
    return blocks


def _drain_queued(st: SessionState) -> list[dict[str, Any]]:
    blocks = [b for m in st.queued for b in m["content"]]
    st.queued = []
    return blocks


def _run_config(body: StartRun, cfg: CoreConfig) -> RunConfig:
    profile = get_profile(body.profile)
    models = [body.model.primary or cfg.default_model, *body.model.fallbacks]
    limits = body.limits
    return RunConfig(
        profile=body.profile, system=body.system, models=models,
        max_tokens=body.model.max_tokens or cfg.default_max_tokens, temperature=body.model.temperature,
        tools=body.tools, tool_permissions=dict(body.tool_permissions),
        max_turns=limits.max_turns or profile.max_turns,
        max_total_tokens=limits.max_total_tokens, max_cost_usd=limits.max_cost_usd,
        context_window=limits.context_window or 200_000,
        compaction_at_pct=limits.compaction_at_pct or profile.compaction_at_pct,
        metadata=body.metadata,
    )


def _input_messages(body: StartRun) -> list[dict[str, Any]]:
    if isinstance(body.input, str):
        return [{"role": "user", "content": text_to_content(body.input)}]
    return [{"role": m.role, "content": text_to_content(m.content)} for m in body.input]


_HANDLERS: dict[type, Any] = {
    i.StartInput: _on_start,
    i.MessageInput: _on_message,
    i.SteerInput: _on_message,
    i.AbortInput: _on_abort,
    i.DecisionInput: _on_decision,
    i.GenerationInput: _on_generation,
    i.ToolsInput: _on_tools,
}
