"""agentic_planned: PlanBuilder, PlanTracker and VerifyPhase.

    init ─▶ plan ──(a plan is recorded)──▶ execute ──(every step completed)──▶ verify ──(answer)──▶ done
                                            └─(ended with steps open: nudged)─▶ execute

- **PlanBuilder** (phase `plan`): the first generation gets a note with the task, the
  WorkspaceSnapshot (workspace.py, gathered by the shell) and the run's tools, and is
  offered ONLY the reserved tool `update_plan`, so it plans before it acts. The plan is
  the call's `plan` list; a model that answers in text instead has its numbered or
  bulleted lines taken as the plan; with neither it is asked once more (`PLAN_NUDGES`),
  then the task itself becomes a one-step plan. A `plan` in StartRun skips this phase.
- **PlanTracker** (phase `execute`): the model marks steps with `update_plan` (the whole
  list each time, Codex-style: `{"plan": [{"step", "status"}]}`, status `pending`,
  `in_progress` or `completed`), alongside its other tool calls. The core answers the call
  itself (no tool service sees it); when every step is `completed` the run moves to
  `verify` and the call's result asks for the verification. A reply that ends the turn
  with steps still open is nudged once per open plan (`PLAN_NUDGES`: execute→execute), then moves on to
  `verify` too: the model said it is done, so it is asked to check.
- **VerifyPhase** (phase `verify`): the model verifies (tools are still offered) and
  answers; that answer is recorded as the run's `verification` and ends the run
  `completed` (`verify -> done`).

Every change of the plan is a `plan.updated` event (loopwire's addition, docs/protocol.md: `steps`, `source`,
`phase`, and `verification` once recorded) and is kept in the session state
(`SessionState.plan`, shown by `session.get`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.contract.event_fields import PlanSource, PlanUpdatedFields
from loopwire.shared.contract.messages import ContentBlock, tool_result_block
from loopwire.shared.contract.protocol import UPDATE_PLAN_TOOL
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState

from . import loop_detection
from .next_step import EventSpec, NextStep, NextStepFinalOutput, NextStepRunAgain
from .phases import Transitions, change_phase
from .stages import Turn, user_message

UPDATE_PLAN = UPDATE_PLAN_TOOL
STATUSES = ("pending", "in_progress", "completed")
PLAN_NUDGES = 1
MAX_STEPS = 50
STEP_CHARS = 300

UPDATE_PLAN_SPEC = ToolSpec(
    name=UPDATE_PLAN,
    description=("Record your plan, or update the status of its steps. Send the whole plan every time: "
                 "each step with status pending, in_progress or completed."),
    input_schema={
        "type": "object",
        "properties": {
            "explanation": {"type": "string"},
            "plan": {"type": "array", "items": {
                "type": "object",
                "properties": {"step": {"type": "string"}, "status": {"type": "string", "enum": list(STATUSES)}},
                "required": ["step", "status"],
            }},
        },
        "required": ["plan"],
    },
)

PLAN_NOTE = ("Phase: plan. Before doing anything, make a plan for the task: call update_plan with the steps "
             "(each with status pending). Do not call other tools yet.")
PLAN_NUDGE = "Please record your plan now: call update_plan with the list of steps (status pending)."
PLAN_RECORDED = ("Plan recorded ({n} steps). Now carry it out step by step; call update_plan to mark each step "
                 "in_progress or completed as you go.")
STEPS_UPDATED = "Plan updated: {done}/{n} steps completed."
VERIFY_REQUEST = ("Every step of the plan is completed. Now verify the result: check that the task is really done "
                  "(use the tools if that helps), then reply with your verification and the final answer.")
OPEN_STEPS_NUDGE = ("These plan steps are not completed yet: {open}. Continue with them, and mark them completed "
                    "with update_plan; or, if they are done, say so with update_plan.")

_LIST_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*•]|step\s+\d+[:.)])\s+(?P<step>\S.*)$", re.IGNORECASE)


def _step(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        text, status = raw, "pending"
    elif isinstance(raw, dict):
        text = raw.get("step") or raw.get("title") or raw.get("description") or raw.get("text") or ""
        status = raw.get("status") or "pending"
    else:
        return None
    text = " ".join(str(text).split())[:STEP_CHARS]
    if not text:
        return None
    status = str(status).lower().replace(" ", "_").replace("-", "_")
    status = {"done": "completed", "complete": "completed", "todo": "pending", "doing": "in_progress",
              "active": "in_progress"}.get(status, status)
    return {"step": text, "status": status if status in STATUSES else "pending"}


def parse_plan(raw: Any) -> list[dict[str, Any]]:
    """A plan from StartRun `plan` or an `update_plan` input: a list of steps (strings or
    `{"step"|"title", "status"}`), or an object holding one under `plan` or `steps`."""
    if isinstance(raw, dict):
        raw = raw.get("plan", raw.get("steps"))
    if isinstance(raw, str):
        return parse_plan_text(raw)
    if not isinstance(raw, list):
        return []
    return [s for s in (_step(r) for r in raw[:MAX_STEPS]) if s is not None]


def parse_plan_text(text: str) -> list[dict[str, Any]]:
    """Numbered or bulleted lines of a text answer, as pending steps."""
    steps = [m.group("step") for line in text.splitlines() if (m := _LIST_LINE.match(line))]
    return [s for s in (_step(t) for t in steps[:MAX_STEPS]) if s is not None]


def open_steps(plan: list[dict[str, Any]]) -> list[str]:
    return [s["step"] for s in plan if s["status"] != "completed"]


def all_done(plan: list[dict[str, Any]]) -> bool:
    return bool(plan) and not open_steps(plan)


def plan_note(run: RunState, tool_names: list[str] | None) -> str:
    """The plan-phase note: what to plan with (the workspace, the tools)."""
    parts = [PLAN_NOTE]
    if tool_names:
        parts.append("Tools you will have in the execute phase: " + ", ".join(tool_names) + ".")
    if run.plan.workspace:
        parts.append(run.plan.workspace)
    return "\n\n".join(parts)


def status_note(run: RunState) -> str:
    """The execute-phase reminder of the plan and where it stands."""
    lines = [f"{n}. [{s['status']}] {s['step']}" for n, s in enumerate(run.plan.steps, 1)]
    return "Phase: execute. The plan:\n" + "\n".join(lines)


def record(session: SessionState, run: RunState, source: PlanSource) -> EventSpec:
    """Keep the plan in the session (session.get) and say so: a `plan.updated` event."""
    # Each stored step is `{"step", "status"}` (as the parsers above make it).
    fields: PlanUpdatedFields = {"steps": [{"step": s["step"], "status": s["status"]} for s in run.plan.steps],
                                 "source": source, "phase": run.profile_phase}
    if run.plan.verification is not None:
        fields["verification"] = run.plan.verification
    session.plan = {"run_id": run.run_id, "steps": fields["steps"], "phase": run.profile_phase,
                    "verification": run.plan.verification}
    return EventSpec("plan.updated", fields)


def apply_update(session: SessionState, run: RunState, call: ContentBlock, *,
                 transitions: Transitions) -> tuple[ContentBlock, list[EventSpec]]:
    """An `update_plan` call, answered by the core: its tool_result block and the events
    (plan.updated, and phase.changed, along the profile's `transitions`, when the plan
    was recorded or completed)."""
    steps = parse_plan((call.get("input") or {}).get("plan"))
    if not steps:
        return (tool_result_block(call["id"], "update_plan needs a non-empty `plan`: a list of {step, status}.",
                                  is_error=True), [])
    run.plan.steps = steps
    events: list[EventSpec] = []
    if run.profile_phase == "plan":
        run.plan.nudges = 0
        events.append(change_phase(run, "execute", transitions))
        answer = PLAN_RECORDED.format(n=len(steps))
    else:
        answer = STEPS_UPDATED.format(done=len(steps) - len(open_steps(steps)), n=len(steps))
    if run.profile_phase == "execute" and all_done(steps):
        events.append(change_phase(run, "verify", transitions))
        answer = f"{answer} {VERIFY_REQUEST}"
        loop_detection.clear(run)  # a new request (NextStepRunAgain.new_request)
    events.append(record(session, run, "model"))
    return tool_result_block(call["id"], answer), events


@dataclass(frozen=True)
class PlanStage:
    """What a text-only reply means in each phase of agentic_planned (tool calls go on
    to the strategy loop, where `update_plan` is answered by `apply_update`)."""

    name: str = "plan"

    def after_generation(self, turn: Turn) -> NextStep | None:
        run = turn.run
        if turn.tool_calls or turn.stop_reason not in ("end_turn", "stop_sequence", None):
            return None
        if run.profile_phase == "plan":
            return self._plan_from_text(turn)
        if run.profile_phase == "execute":
            remaining = open_steps(run.plan.steps)
            if remaining and run.plan.nudges < PLAN_NUDGES:
                run.plan.nudges += 1  # sent back to carry out the open steps: execute -> execute
                return NextStepRunAgain(append=[user_message(OPEN_STEPS_NUDGE.format(open="; ".join(remaining)[:1000]))],
                                        reason="plan_nudge", events=(change_phase(run, "execute", turn.transitions),))
            return NextStepRunAgain(append=[user_message(VERIFY_REQUEST)], reason="verify", new_request=True,
                                    events=(change_phase(run, "verify", turn.transitions),))
        if run.profile_phase == "verify":
            run.plan.verification = turn.text
            phase = change_phase(run, "done", turn.transitions)
            return NextStepFinalOutput(status="completed", text=turn.text,
                                       events=(phase, record(turn.session, run, "verification")))
        return None

    def _plan_from_text(self, turn: Turn) -> NextStep:
        run = turn.run
        steps = parse_plan_text(turn.text)
        if not steps and run.plan.nudges < PLAN_NUDGES:
            run.plan.nudges += 1
            return NextStepRunAgain(append=[user_message(PLAN_NUDGE)], reason="plan_nudge")
        source: PlanSource = "text"
        if not steps:
            steps, source = [{"step": run.task or "Do the task.", "status": "pending"}], "fallback"
        run.plan.steps = steps
        run.plan.nudges = 0
        phase = change_phase(run, "execute", turn.transitions)
        return NextStepRunAgain(append=[user_message(PLAN_RECORDED.format(n=len(steps)))], reason="plan_recorded",
                                new_request=True,
                                events=(phase, record(turn.session, run, source)))

