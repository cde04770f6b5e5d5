"""A tool batch, from its dispatch to what follows it: its record in the technical summary,
the inner iteration limit, the progress note.

The batch goes through the strategy loop (strategy_loop.py): the plan gate validates
every call, reserved tools are answered by the core, the preview opens an approval
checkpoint when a call needs one (the whole batch waits), else the batch goes to the
tools service (`tools.execute`, `dispatch` and `execute`). Its results come back as one
user message, in the model's order (`after_batch`): they are counted into the run's
record (`record_batch`), one more tool round of the outer iteration is done, and the next
generation is asked for, with the progress note, unless that round was the last one a
limit allows (`inner_limit`): the batch a capped turn asked for still runs and its results
reach the history and the run's summary, and only then does the run end `max_turns`.

How long a run may go on: turns, inner iterations, outer iterations.

- `max_turns` (StartRun `limits.max_turns`, else the profile's): generations in the run;
- `max_inner_iterations` (LOOPWIRE_MAX_INNER_ITERATIONS, else the profile's): tool rounds
  (batches whose results came back) in one outer iteration, i.e. since the run started
  or last took follow-ups;
- `max_outer_iterations` (LOOPWIRE_MAX_OUTER_ITERATIONS, else the profile's): outer
  iterations, i.e. times follow-up `message`s are taken at the outer boundary.

A turn that wants another generation past a limit ends the run instead, with its best
answer and status `max_turns`. A turn that asks for tools at a limit still has them run:
the batch is the last round, its results join the history and the run's summary, and
then the run ends `max_turns` (`after_batch`). `run.ended.reason` (loopwire's addition,
docs/protocol.md) says which limit it was: `max_turns`, `max_inner_iterations` or
`max_outer_iterations`.
Follow-ups that arrive past the outer limit stay out of the capped run: they start the
next run, as on an idle session (run_lifecycle.end_run), and the capped run ends with the
answer it gave.

ProgressInjector: after tool results, remind the model of the task and the progress. In
long tool loops the original request scrolls far up the context and models drift. With
the profile setting `progress_injection: system_reminder`, the generation after each tool
batch gets a short ephemeral note (AssembleContext.ephemeral_notes, rendered by the memory
service as a `<system-reminder>` on the system prompt of that one request): the first user
request (truncated) and what has been done so far. It is never stored in the history, so
it costs no context in later turns and the history stays what the user and model said.
`none` turns it off. What has been done is the run's record of its batches
(`record_batch`); the summary made of that record when the router stops a run is
finish.py's (`stopped_conclusion`).
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.contract.event_fields import ToolCallFields, tool_result_event
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.run_state import RunState

from . import approval, planning, strategy_loop
from .config import CoreConfig
from .effects import PublishWork
from .follow_ups import drain_steering, truncate
from .profiles import Profile
from .run_lifecycle import end_run
from .step_requests import request_generation, to_review
from .transition import Transition

# The batch: dispatched, executed, and its results back.


def dispatch(tx: Transition, run: RunState, calls: list[ContentBlock], *, profile: Profile,
             schemas: dict[str, dict[str, Any]] | None, cfg: CoreConfig) -> None:
    """The strategy loop after interpret (strategy_loop.py): validate (the plan gate),
    reserved tools answered by the core, preview (an approval checkpoint when a call
    needs one: the whole batch waits), else execute."""
    ids = message_ids.tool_batch_ids(run.run_id, run.turn, [c["id"] for c in calls])
    for c, key in zip(calls, ids.call_keys, strict=True):
        tx.emit("tool.call", key, run.run_id, ToolCallFields(turn=run.turn, tool_use_id=c["id"], name=c["name"],
                input=c.get("input", {})))
    verdict = strategy_loop.gate(run, profile, calls, schemas=schemas, validators=cfg.schema_validators)
    run.tools.answered = []
    for n, c in enumerate(verdict.reserved):
        block, specs = planning.apply_update(tx.st, run, c, transitions=profile.transitions)
        run.tools.answered.append(block)
        tx.emit("tool.result", message_ids.tool_result_key(c["id"]), run.run_id,
                tool_result_event(turn=run.turn, tool_use_id=c["id"], name=c["name"],
                                    is_error=bool(block.get("is_error")), content=block["content"]))
        for m, spec in enumerate(specs):
            tx.emit_spec(run, spec, message_ids.event_key(spec.kind, ids.step_id, n, m))
    if verdict.ask:
        to_review(tx, run, profile)
        fields = approval.open_checkpoint(tx.st, run, kind="tool_calls", calls=calls, ask=verdict.ask,
                                          rejected=verdict.rejected, text=run.last_text)
        tx.emit("approval.requested", message_ids.event_key("approval.requested", fields["checkpoint_id"]), run.run_id, fields)
        return
    execute(tx, run, calls, profile=profile, denied=verdict.rejected, cfg=cfg, ids=ids)


def execute(tx: Transition, run: RunState, calls: list[ContentBlock], *, profile: Profile,
            denied: dict[str, str], cfg: CoreConfig, ids: message_ids.ToolBatchIds | None = None) -> None:
    """execute: the batch as one ExecuteTools step; calls in `denied` never reach a
    provider (the tools service answers them with the reason); calls the core answered
    (`run.tools.answered`) are not sent at all. `ids`: the batch's, as `dispatch` took
    them (a batch an approval let through takes its own)."""
    run.awaiting = "tools"
    if ids is None:
        ids = message_ids.tool_batch_ids(run.run_id, run.turn, [c["id"] for c in calls])
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
        recording=tx.st.tool_recording, report_calls=True,
    )
    tx.effects.append(PublishWork(work=env, envelope=env.model_dump(mode="json"), msg_id=ids.msg_id))


def after_batch(tx: Transition, run: RunState, blocks: list[ContentBlock], *, profile: Profile,
                cfg: CoreConfig) -> None:
    """summarize: the batch's results go back in one user message, in the model's order,
    and the next generation is reminded of the task and the progress; or, the round at a
    limit done, the run ends `max_turns` with its best answer and its summary."""
    names = {c["id"]: c["name"] for c in run.tools.pending_calls}
    run.tools.pending_calls = []
    run.tools.answered = []
    record_batch(run, blocks, names)
    # steering kept by state written before steering applied at once (follow_ups.py), if any
    content: list[ContentBlock] = [*blocks, *drain_steering(tx.st)] if tx.st.steering else list(blocks)
    tx.add_message({"role": "user", "content": content})
    run.limits.inner += 1
    limit = inner_limit(run, profile, cfg)
    if limit is not None:
        end_run(tx, "max_turns", None, cfg=cfg, reason=limit)
        return
    notes = progress_notes(run, blocks, names, mode=run.config.progress_injection or profile.progress_injection)
    request_generation(tx, run, profile, notes=notes)


# Its record in the technical summary.


def record_batch(run: RunState, results: list[ContentBlock], names: dict[str, str]) -> None:
    """Count a finished batch into the run's record: its calls and the tools used (what
    the progress note reads) and each result under its tool, ok or error
    (the technical summary's `executed`, finish.stopped_conclusion)."""
    run.tools.calls_made += len(results)
    by_tool = {e["tool"]: e for e in run.tools.executed}
    for block in results:
        name = names.get(block.get("tool_use_id", ""), "")
        if not name:
            continue
        if name not in run.tools.used:
            run.tools.used.append(name)
        entry = by_tool.get(name)
        if entry is None:
            entry = by_tool[name] = {"tool": name, "calls": 0, "ok": 0, "error": 0}
            run.tools.executed.append(entry)
        entry["calls"] += 1
        entry["error" if block.get("is_error") else "ok"] += 1


# The inner iteration limit (and the outer one, which turn_resolution.py reads).


def inner_limit(run: RunState, profile: Profile, cfg: CoreConfig) -> str | None:
    """The limit that forbids another generation (or, after a batch, another round) in
    this outer iteration, or None."""
    if run.turn >= run.config.max_turns:
        return "max_turns"
    cap = run.config.max_inner_iterations or cfg.max_inner_iterations or profile.max_inner_iterations
    if run.limits.inner >= cap:
        return "max_inner_iterations"
    return None


def outer_limit(run: RunState, profile: Profile, cfg: CoreConfig) -> str | None:
    """`max_outer_iterations` when the run may not take follow-ups once more, or None."""
    cap = run.config.max_outer_iterations or cfg.max_outer_iterations or profile.max_outer_iterations
    return "max_outer_iterations" if run.limits.outer >= cap else None


# The progress note.

TASK_CHARS = 300
"""How much of the task the progress note shows."""


def progress_note(run: RunState, results: list[ContentBlock], names: dict[str, str]) -> str:
    """The reminder for the generation after a tool batch."""
    last = ", ".join(f"{names.get(b.get('tool_use_id', ''), '?')} ({'error' if b.get('is_error') else 'ok'})"
                     for b in results)
    used = ", ".join(run.tools.used[:12]) or "none"
    # run.task is folded already (run_lifecycle.py, journal_resume.py): only a longer one is cut
    task = run.task if len(run.task) <= TASK_CHARS else truncate(run.task, TASK_CHARS)
    return (f"Task: {task or '(see the first user message)'}\n"
            f"Progress: {run.tools.calls_made} tool call(s) over {run.turn} turn(s); tools used: {used}; "
            f"latest results: {last or 'none'}.\n"
            "Continue with the task. When it is done, reply with the final answer.")


def progress_notes(run: RunState, results: list[ContentBlock], names: dict[str, str], *, mode: str) -> list[str]:
    """The notes for the profile's `progress_injection` mode (`system_reminder` or `none`)."""
    if mode != "system_reminder":
        return []
    return [progress_note(run, results, names)]
