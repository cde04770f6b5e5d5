"""A run waiting on a checkpoint, rebuilt from its transcript alone (journal_resume.py):
a decision decided on the rebuilt state does what it does on the lost one, with exactly
the stored calls."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.assembly import normalise_messages
from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, decide
from loopwire.router.core.effects import EmitEvent, PublishWork
from loopwire.router.shell.rebuild import reconstruct
from loopwire.shared.contract.envelopes import ToolResultItem, ToolsResult
from loopwire.shared.contract.protocol import ApprovalDecision
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.runtime.pricing import price_table

from .test_rebuild import SID, Driver, t

pytestmark = pytest.mark.unit

PRICES = price_table({"claude-a": {"input": 1.0, "output": 2.0}})
CFG = CoreConfig(default_model="claude-a", default_max_tokens=100, prices=PRICES)


def use(tid: str, name: str = "add", **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp or {"a": 1, "b": 2}}


class Journal(Driver):
    """The rebuild suite's driver, with decisions, prices, and the tools service's events per turn."""

    def apply(self, inp: i.BaseInput) -> None:
        d = decide(self.state, inp, CFG)
        assert d.state is not None
        del self.history[d.history_len_before:]
        self.history.extend(d.append)
        self.state = d.state
        for effect in d.effects:
            if isinstance(effect, EmitEvent):
                self.emit(effect.kind, effect.run_id, **effect.fields)
            elif isinstance(effect, PublishWork):
                self.pending = effect.envelope["step_id"]

    def tools(self, *results: tuple[str, str]) -> None:
        assert self.state.run is not None and self.pending is not None
        run, names = self.state.run, {c["id"]: c["name"] for c in self.state.run.tools.pending_calls}
        items = [ToolResultItem(tool_use_id=tid, name=names[tid], content=c) for tid, c in results]
        for item in items:
            self.emit("tool.result", run.run_id, turn=run.turn, tool_use_id=item.tool_use_id, name=item.name,
                      is_error=False, content=item.content)
        self.apply(i.ToolsInput(input_id=self.pending, result=ToolsResult(
            session_id=SID, run_id=run.run_id, step_id=self.pending, results=items)))

    def decision(self, decision: str = "approve", note: str | None = None) -> i.DecisionInput:
        self.inputs += 1
        assert self.state.run is not None and self.state.run.approvals.checkpoint is not None
        return i.DecisionInput(input_id=f"in:{self.inputs}", body=ApprovalDecision(
            checkpoint_id=self.state.run.approvals.checkpoint.id, decision=decision, note=note))

    def rebuilt(self) -> tuple[SessionState, list[dict[str, Any]]]:
        rebuilt = reconstruct(SID, self.events, prices=PRICES)
        assert rebuilt is not None
        return SessionState.load(rebuilt.state, SID), rebuilt.history


def work(state: SessionState, inp: i.BaseInput) -> list[PublishWork]:
    d = decide(state, inp, CFG)
    return [e for e in d.effects if isinstance(e, PublishWork)]


def kinds(state: SessionState, inp: i.BaseInput) -> list[str]:
    return [e.kind for e in decide(state, inp, CFG).effects if isinstance(e, EmitEvent)]


def test_an_approval_of_a_mixed_batch_runs_exactly_the_stored_calls_after_the_state_is_lost() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "Add, then clean up.", "tools": ["add", "rm", "mul"],
                          "tool_permissions": {"rm": "approve", "mul": "deny"}})
    drv.generation(t("Adding."), use("tu1"))
    drv.tools(("tu1", "3"))
    drv.generation(t("Cleaning."), use("tu2", a=5, b=5), use("tu3", "rm", path="/tmp/x"), use("tu4", "mul"))
    lost = drv.state
    assert lost.status == "awaiting_approval"
    state, history = drv.rebuilt()
    assert state.status == "awaiting_approval" and state.run is not None and state.run.approvals.checkpoint is not None
    assert state.run.approvals.checkpoint.model_dump() == lost.run.approvals.checkpoint.model_dump(), \
        "the same checkpoint"
    assert normalise_messages(history) == normalise_messages(drv.history), "the batch still waits for results"
    assert history[-1]["content"][1:] == [use("tu2", a=5, b=5), use("tu3", "rm", path="/tmp/x"), use("tu4", "mul")]
    run = state.run
    assert (run.turn, run.limits.inner, run.task, run.last_text) == (2, 1, "Add, then clean up.", "Cleaning.")
    assert run.tools.executed == [{"tool": "add", "calls": 1, "ok": 1, "error": 0}]
    assert run.budget.usage.input_tokens == 20 and run.budget.cost_usd == lost.run.budget.cost_usd > 0
    approve = drv.decision("approve")
    (sent,) = work(state, approve)
    (original,) = work(lost, approve)
    assert sent.envelope == original.envelope, "the same step, the same calls, the same denials"
    assert [c["tool_use_id"] for c in sent.envelope["calls"]] == ["tu2", "tu3", "tu4"]
    assert set(sent.envelope["denied"]) == {"tu4"}, "the plan gate's rejection still holds"
    assert sent.msg_id == original.msg_id


def test_a_denial_after_the_loss_answers_the_asked_calls_and_the_model_goes_on() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "Clean up.", "tools": ["rm"], "tool_permissions": {"rm": "approve"}})
    drv.generation(t("Removing."), use("tu1", "rm", path="/"))
    state, _ = drv.rebuilt()
    deny = drv.decision("deny", "not the root")
    (sent,) = work(state, deny)
    assert sent.envelope["denied"] == {"tu1": "denied by the user: not the root"}


def test_a_turn_by_turn_proposal_is_resumed_and_its_approval_completes_the_run() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "What is 40 + 2?", "profile": "turn_by_turn", "tools": ["add"]})
    drv.generation(t("It is 42."))
    state, _ = drv.rebuilt()
    assert state.run is not None and state.run.approvals.checkpoint is not None
    assert state.run.approvals.checkpoint.kind == "proposal"
    approve = drv.decision("approve")
    assert kinds(state, approve) == kinds(drv.state, approve)
    ended = [e for e in decide(state, approve, CFG).effects if isinstance(e, EmitEvent) and e.kind == "run.ended"]
    assert ended[0].fields["status"] == "completed" and ended[0].fields["final_text"] == "It is 42."


def test_a_planned_run_comes_back_with_its_plan_and_the_reserved_result_of_its_batch() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "Deploy.", "profile": "agentic_planned", "tools": ["deploy"],
                          "tool_permissions": {"deploy": "approve"}, "plan": ["build", "deploy"]})
    drv.generation(t("Deploying."), use("tu1", "update_plan", plan=[{"step": "build", "status": "completed"},
                                                                    {"step": "deploy", "status": "in_progress"}]),
                   use("tu2", "deploy", env="prod"))
    lost = drv.state
    state, _ = drv.rebuilt()
    assert state.run is not None
    assert state.run.plan.steps == lost.run.plan.steps
    assert state.run.profile_phase == lost.run.profile_phase == "execute"
    assert state.plan == lost.plan, "session.get's plan"
    assert state.run.tools.answered == lost.run.tools.answered, \
        "update_plan was answered by the core before the checkpoint"
    approve = drv.decision("approve")
    (sent,) = work(state, approve)
    assert sent.envelope == work(lost, approve)[0].envelope
    assert [c["tool_use_id"] for c in sent.envelope["calls"]] == ["tu2"]


def test_a_decided_checkpoint_and_a_withdrawn_one_are_not_resumed() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "Clean up.", "tools": ["rm"], "tool_permissions": {"rm": "approve"}})
    drv.generation(t("Removing."), use("tu1", "rm"))
    drv.apply(drv.decision("approve"))  # the batch is out: the tools service has it
    state, _ = drv.rebuilt()
    assert state.status == "idle" and state.run is None
    drv2 = Journal()
    drv2.ingress("start", {"input": "Clean up.", "tools": ["rm"], "tool_permissions": {"rm": "approve"}})
    drv2.generation(t("Removing."), use("tu1", "rm"))
    drv2.ingress("steer", {"content": "no, stop"})
    state, _ = drv2.rebuilt()
    assert state.status == "idle"


def test_new_generations_of_a_resumed_run_never_reuse_a_step_id() -> None:
    drv = Journal()
    drv.ingress("start", {"input": "Clean up.", "tools": ["rm"], "tool_permissions": {"rm": "approve"}})
    drv.generation(t("Removing."), use("tu1", "rm"))
    state, _ = drv.rebuilt()
    deny = drv.decision("deny")
    d = decide(state, deny, CFG)
    assert d.state is not None and d.state.run is not None
    results = i.ToolsInput(input_id=d.state.run.pending_step or "", result=ToolsResult(
        session_id=SID, run_id=d.state.run.run_id, step_id=d.state.run.pending_step or "",
        results=[ToolResultItem(tool_use_id="tu1", name="rm", content="denied", is_error=True)]))
    (gen,) = work(d.state, results)
    used = {f"{d.state.run.run_id}:g{n}" for n in range(1, drv.state.run.gen_seq + 1)}
    assert gen.envelope["step_id"] not in used
