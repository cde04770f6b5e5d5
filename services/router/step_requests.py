"""The work a run asks for: its next generation, and its tool batches.

A generation is asked of memory (`memory.assemble`, which assembles the context and
hands it to llm): with the notes it needs (the converging note when a budget is spent,
the plan or the workspace snapshot of a planned profile, the reminders of
progress_injection.py), the tools the strategy loop offers, and `max_tokens` within the
token budget. A tool batch goes through the strategy loop (strategy_loop.py): the plan
gate validates every call, reserved tools are answered by the core, the preview opens an
approval checkpoint when a call needs one (the whole batch waits), else the batch goes to
the tools service (`tools.execute`). Its results come back as one user message, in the
model's order (`after_batch`), and the next generation is asked for.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import AssembleContext, ExecuteTools, ToolCall

from . import approval, budget, planning, strategy_loop, technical_summary
from .effects import PublishWork
from .executor_profiles import spec_for
from .finish import OUT_OF_BUDGET_NOTE
from .follow_ups import drain_steering
from .phases import change_phase
from .profiles import get_profile
from .progress_injection import note_tool_batch, progress_notes
from .state import RunState
from .transition import Transition


def request_generation(tx: Transition, run: RunState, notes: list[str] | None = None) -> None:
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
    step_id = keys.generation_step_id(run.run_id, run.gen_seq)
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
                                  msg_id=keys.assemble_msg_id(step_id)))


def dispatch(tx: Transition, run: RunState, calls: list[dict[str, Any]],
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
            tx.emit_spec(run, spec, f"{spec.kind}:{run.run_id}:t{run.turn}:{n}:{m}")
    ask = strategy_loop.preview(run, calls, rejected, reserved)
    if ask:
        to_review(tx, run)
        fields = approval.open_checkpoint(tx.st, run, "tool_calls", calls, ask, rejected, run.last_text)
        tx.emit("approval.requested", f"approval.requested:{fields['checkpoint_id']}", run.run_id, **fields)
        return
    execute(tx, run, calls, rejected)


def execute(tx: Transition, run: RunState, calls: list[dict[str, Any]], denied: dict[str, str]) -> None:
    """execute: the batch as one ExecuteTools step; calls in `denied` never reach a
    provider (the tools service answers them with the reason); calls the core answered
    (`run.answered`) are not sent at all."""
    run.awaiting = "tools"
    step_id = keys.tools_step_id(run.run_id, run.turn)
    run.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    answered = {b["tool_use_id"]: b for b in run.answered}
    to_run = [c for c in calls if c["id"] not in answered]
    if not to_run:  # only reserved tools: nothing to wait for
        run.pending_step = None
        after_batch(tx, run, [answered[c["id"]] for c in calls])
        return
    run.pending_step = step_id
    env = ExecuteTools(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn,
        calls=[ToolCall(tool_use_id=c["id"], name=c["name"], input=c.get("input") or {}) for c in to_run],
        denied={c["id"]: denied[c["id"]] for c in to_run if c["id"] in denied}, trace=run.trace,
    )
    tx.effects.append(PublishWork(target="tools.execute", envelope=env.model_dump(mode="json"), model=env,
                                  msg_id=keys.execute_msg_id(step_id)))


def after_batch(tx: Transition, run: RunState, blocks: list[dict[str, Any]]) -> None:
    """summarize: the batch's results go back in one user message, in the model's order,
    and the next generation is reminded of the task and the progress."""
    names = {c["id"]: c["name"] for c in run.pending_calls}
    run.pending_calls = []
    run.answered = []
    note_tool_batch(run, blocks, names)
    technical_summary.record_batch(run, blocks, names)
    content: list[dict[str, Any]] = blocks + drain_steering(tx.st)
    tx.add_message({"role": "user", "content": content})
    profile = get_profile(run.config.profile)
    notes = progress_notes(profile.progress_injection, run, blocks, names)
    request_generation(tx, run, notes=notes)


def move_phase(tx: Transition, run: RunState, to: str) -> None:
    """Move the run to profile phase `to` (checked against the profile's table) and emit
    `phase.changed`."""
    tx.emit_spec(run, change_phase(run, to, get_profile(run.config.profile).transitions), "")


def to_review(tx: Transition, run: RunState) -> None:
    """turn_by_turn: a proposal made after executing goes back to review (execute→review);
    one made in review stays there."""
    if run.profile_phase == "execute" and get_profile(run.config.profile).reviews_every_turn:
        move_phase(tx, run, "review")
