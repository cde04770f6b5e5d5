"""A turn's tool batch through the strategy loop (strategy_loop.py), and what its results
lead to.

The plan gate validates every call, reserved tools are answered by the core, the preview
opens an approval checkpoint when a call needs one (the whole batch waits), else the
batch goes to the tools service (`tools.execute`, `dispatch` and `execute`). Its results
come back as one user message, in the model's order (`after_batch`): one more tool round
of the outer iteration, and the next generation is asked for, unless that round was the
last one a limit allows (iteration_limits.py): the batch a capped turn asked for still
runs and its results reach the history and the run's summary, and only then does the
run end `max_turns`.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.contract.messages import tool_result_event
from loopwire.shared.contract.run_state import RunState

from . import approval, planning, strategy_loop, technical_summary
from .config import CoreConfig
from .effects import PublishWork
from .follow_ups import drain_steering
from .iteration_limits import inner_limit
from .profiles import Profile
from .progress_injection import progress_notes
from .run_lifecycle import end_run
from .step_requests import request_generation, to_review
from .transition import Transition


def dispatch(tx: Transition, run: RunState, calls: list[dict[str, Any]], *, profile: Profile,
             schemas: dict[str, dict[str, Any]] | None, cfg: CoreConfig) -> None:
    """The strategy loop after interpret (strategy_loop.py): validate (the plan gate),
    reserved tools answered by the core, preview (an approval checkpoint when a call
    needs one: the whole batch waits), else execute."""
    ids = keys.tool_batch_ids(run.run_id, run.turn, [c["id"] for c in calls])
    for c, key in zip(calls, ids.call_keys, strict=True):
        tx.emit("tool.call", key, run.run_id, turn=run.turn, tool_use_id=c["id"], name=c["name"],
                input=c.get("input", {}))
    verdict = strategy_loop.gate(run, profile, calls, schemas=schemas, validators=cfg.schema_validators)
    run.tools.answered = []
    for n, c in enumerate(verdict.reserved):
        block, specs = planning.apply_update(tx.st, run, c, transitions=profile.transitions)
        run.tools.answered.append(block)
        tx.emit("tool.result", keys.tool_result_key(c["id"]), run.run_id,
                **tool_result_event(turn=run.turn, tool_use_id=c["id"], name=c["name"],
                                    is_error=bool(block.get("is_error")), content=block["content"]))
        for m, spec in enumerate(specs):
            tx.emit_spec(run, spec, keys.event_key(spec.kind, ids.step_id, n, m))
    if verdict.ask:
        to_review(tx, run, profile)
        fields = approval.open_checkpoint(tx.st, run, kind="tool_calls", calls=calls, ask=verdict.ask,
                                          rejected=verdict.rejected, text=run.last_text)
        tx.emit("approval.requested", keys.event_key("approval.requested", fields["checkpoint_id"]), run.run_id, **fields)
        return
    execute(tx, run, calls, profile=profile, denied=verdict.rejected, cfg=cfg, ids=ids)


def execute(tx: Transition, run: RunState, calls: list[dict[str, Any]], *, profile: Profile,
            denied: dict[str, str], cfg: CoreConfig, ids: keys.ToolBatchIds | None = None) -> None:
    """execute: the batch as one ExecuteTools step; calls in `denied` never reach a
    provider (the tools service answers them with the reason); calls the core answered
    (`run.tools.answered`) are not sent at all. `ids`: the batch's, as `dispatch` took
    them (a batch an approval let through takes its own)."""
    run.awaiting = "tools"
    if ids is None:
        ids = keys.tool_batch_ids(run.run_id, run.turn, [c["id"] for c in calls])
    step_id = ids.step_id
    run.tools.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    answered = {b["tool_use_id"]: b for b in run.tools.answered}
    to_run = [c for c in calls if c["id"] not in answered]
    if not to_run:  # only reserved tools: nothing to wait for
        run.pending_step = None
        after_batch(tx, run, [answered[c["id"]] for c in calls], profile=profile, cfg=cfg)
        return
    run.pending_step = step_id
    env = ExecuteTools(
        session_id=tx.st.session_id, run_id=run.run_id, step_id=step_id, turn=run.turn,
        calls=[ToolCall(tool_use_id=c["id"], name=c["name"], input=c.get("input") or {}) for c in to_run],
        denied={c["id"]: denied[c["id"]] for c in to_run if c["id"] in denied}, trace=run.trace,
        user_id=run.config.user_id, workspace_id=run.config.workspace_id,
        recording=tx.st.tool_recording,
    )
    tx.effects.append(PublishWork(target="tools.execute", envelope=env.model_dump(mode="json"), model=env,
                                  msg_id=ids.msg_id))


def after_batch(tx: Transition, run: RunState, blocks: list[dict[str, Any]], *, profile: Profile,
                cfg: CoreConfig) -> None:
    """summarize: the batch's results go back in one user message, in the model's order,
    and the next generation is reminded of the task and the progress; or, the round at a
    limit done, the run ends `max_turns` with its best answer and its summary."""
    names = {c["id"]: c["name"] for c in run.tools.pending_calls}
    run.tools.pending_calls = []
    run.tools.answered = []
    technical_summary.record_batch(run, blocks, names)
    content: list[dict[str, Any]] = blocks + drain_steering(tx.st)
    tx.add_message({"role": "user", "content": content})
    run.limits.inner += 1
    limit = inner_limit(run, profile, cfg)
    if limit is not None:
        end_run(tx, "max_turns", None, cfg=cfg, reason=limit)
        return
    notes = progress_notes(run, blocks, names, mode=profile.progress_injection)
    request_generation(tx, run, profile, notes=notes)
