"""The router's side of the external executors (profiles claude_code, opencode, codex, acp).

An external coding agent makes each generation: one generation step is one turn of the
agent (its own model calls and tools inside it), run by the llm service
(services/llm/executors). The router keeps the loop around it, stage by stage:

    ContextGuard → ProgressInjector → CLIExecutor → ModeRouter → TranscriptRecorder
                 → ToolExecutor → CommitmentGate          (claude_code, opencode, codex)
    ContextGuard → ProgressInjector → ACPExecutor → ModeRouter → TranscriptRecorder
                 → CommitmentGate                         (acp)

- ContextGuard: the agent compacts its own context; the llm service asks it to when the
  context it reported last is past the run's `compaction_at_pct` of `context_window`.
- ProgressInjector: the step's system reminders reach the agent with its system prompt.
- CLIExecutor / ACPExecutor: the llm service's executor for the profile (`ExecutorSpec`,
  built here for every generation step: the agent, the workspace, the permissions, the
  turns and budget left).
- ModeRouter: `ExecutorStopStage` (the agent stopped at the run's turn or cost limit) and
  the routing table.
- TranscriptRecorder: the events, as for every run.
- ToolExecutor: the run's loopwire tools, called by the agent over MCP, run by the tools
  service.
- CommitmentGate: an answer that only announces work is nudged in the same agent session.

Permissions (`tool_permissions` over LOOPWIRE_TOOL_POLICY) apply to the agent's own tools by
name: `deny` keeps the tool from the agent, `approve` makes its permission request a durable
checkpoint (`open_permission`), answered by `decision` (`decide_permission`) with a notice to
the llm service, where the agent waits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ExecutorPermission, ExecutorSpec
from loopwire.shared.contract.event_fields import ApprovalRequestedFields
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.protocol import ApprovalDecision
from loopwire.shared.contract.run_state import Checkpoint, RunState
from loopwire.shared.contract.session_state import SessionState

from .budget import tokens_used
from .effects import Effect, EmitEvent, PublishNotice
from .next_step import NextStep, NextStepFinalOutput
from .stages import CommitmentGateStage, RoutingStage, Stage, Turn

CLI_PIPELINE = ("ContextGuard", "ProgressInjector", "CLIExecutor", "ModeRouter", "TranscriptRecorder",
                "ToolExecutor", "CommitmentGate")
ACP_PIPELINE = ("ContextGuard", "ProgressInjector", "ACPExecutor", "ModeRouter", "TranscriptRecorder",
                "CommitmentGate")
EXECUTOR_PROFILES = frozenset({"claude_code", "opencode", "codex", "acp"})


@dataclass(frozen=True)
class ExecutorStopStage:
    """The agent stopped itself at a limit the run gave it (`--max-turns`, its cost
    budget): the run ends with that status and the agent's last answer."""

    name: str = "executor_stop"

    def after_generation(self, turn: Turn) -> NextStep | None:
        if turn.stop_reason == "max_turns":
            return NextStepFinalOutput(status="max_turns", text=turn.text, reason="max_turns")
        if turn.stop_reason == "budget":
            limit = "max_cost_usd" if turn.run.config.max_cost_usd is not None else "max_total_tokens"
            return NextStepFinalOutput(status="budget_exhausted", text=turn.text, reason=limit)
        return None


@dataclass(frozen=True)
class AgentCommitmentGate:
    """CommitmentGate for an agent: it always has tools (its own), whatever the run's
    loopwire `tools`; the nudge joins the history and reaches the agent's session."""

    name: str = "commitment_gate"

    def after_generation(self, turn: Turn) -> NextStep | None:
        return CommitmentGateStage().after_generation(replace(turn, mode="tools"))


EXECUTOR_STAGES: tuple[Stage, ...] = (ExecutorStopStage(), AgentCommitmentGate(), RoutingStage())


def is_executor(profile: str) -> bool:
    return profile in EXECUTOR_PROFILES


def spec_for(run: RunState) -> ExecutorSpec:
    """What the llm service needs for the next step of a run of an executor profile
    (one whose `Profile.executor` is set: the caller, step_requests.py, asks for no other)."""
    cfg = run.config
    turns_left = max(1, cfg.max_turns - run.turn)
    return ExecutorSpec(
        profile=cfg.profile, agent=cfg.executor_agent, workspace=cfg.workspace_path,
        permissions=dict(cfg.tool_permissions),
        # The last, converging generation: one answer, no further turns.
        max_turns=1 if run.limits.converging is not None else turns_left,
        max_total_tokens=None if cfg.max_total_tokens is None else max(0, cfg.max_total_tokens - tokens_used(run)),
        max_cost_usd=None if cfg.max_cost_usd is None else max(0.0, cfg.max_cost_usd - run.budget.cost_usd),
        context_tokens=run.budget.last_context_tokens, compaction_at_pct=cfg.compaction_at_pct,
        context_window=cfg.context_window, user_id=cfg.user_id, workspace_id=cfg.workspace_id)


# -- the agent's permission requests --------------------------------------------------------
def open_permission(session: SessionState, run: RunState, ask: ExecutorPermission) -> tuple[bool, list[Effect]]:
    """(the state changed, the effects) for an agent's request to run an `approve` tool.

    A request decided before is answered again (the llm service asks again until it hears
    back); one already open is waiting; a new one opens the checkpoint. One at a time: a
    second request waits until the first is decided (the llm service asks again)."""
    answer = run.executor.permission_answers.get(ask.checkpoint_id)
    if answer is not None:
        return False, [permission_notice(run, ask.checkpoint_id, answer)]
    if run.approvals.checkpoint is not None:
        return False, []
    call: ContentBlock = {"id": ask.tool_use_id, "name": ask.name, "input": ask.input}
    run.approvals.checkpoint = Checkpoint(id=ask.checkpoint_id, kind="executor", calls=[call], ask=[ask.tool_use_id])
    session.status = "awaiting_approval"
    fields: ApprovalRequestedFields = {"checkpoint_id": ask.checkpoint_id, "turn": ask.turn, "source": "executor",
                                       "tool_calls": [{"tool_use_id": ask.tool_use_id, "name": ask.name,
                                                       "input": ask.input}]}
    return True, [EmitEvent(kind="approval.requested", key=message_ids.event_key("approval.requested", ask.checkpoint_id),
                            run_id=run.run_id, fields=fields)]


def decide_permission(session: SessionState, run: RunState, cp: Checkpoint, *, body: ApprovalDecision) -> list[Effect]:
    """The `decision` on an agent's request: recorded in the run, sent to the waiting agent."""
    run.approvals.checkpoint = None
    session.status = "running"
    answer = {"decision": body.decision, "note": body.note}
    run.executor.permission_answers[cp.id] = answer
    return [permission_notice(run, cp.id, answer)]


def settle_permission(session: SessionState, run: RunState) -> None:
    """The agent's step ended (answered, failed) with its request still open: nobody
    waits for that decision any more."""
    if run.approvals.checkpoint is not None and run.approvals.checkpoint.kind == "executor":
        run.approvals.checkpoint = None
        session.status = "running"


def permission_notice(run: RunState, checkpoint_id: str, answer: dict[str, Any]) -> PublishNotice:
    return PublishNotice(notice="permission", body={"run_id": run.run_id, "checkpoint_id": checkpoint_id,
                                                    "decision": answer.get("decision"), "note": answer.get("note")})
