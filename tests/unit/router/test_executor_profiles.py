"""The router around an external agent (profiles claude_code, opencode, codex, acp): the
seed's stage lists, the step's ExecutorSpec, the agent's permission checkpoints, its limits
and the nudge in its own session. Pure core, no I/O."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig
from loopwire.router.core.executor_profiles import ACP_PIPELINE, CLI_PIPELINE
from loopwire.router.core.profiles import PROFILES
from loopwire.shared.contract.envelopes import ExecutorPermission, GenerationResult, Usage
from loopwire.shared.contract.protocol import StartRun
from tests.router_driver import CFG, PRICES, Driver

pytestmark = pytest.mark.unit


def agent_answer(d: Driver, text: str, turns: int = 1, cost: float | None = 0.25, stop: str = "end_turn",
                 usage: tuple[int, int] = (100, 10)) -> object:
    step = d.pending
    return d.apply(i.GenerationInput(input_id=step, result=GenerationResult(
        session_id=d.state.session_id, run_id=d.run.run_id, step_id=step, model="m1", stop_reason=stop,
        message={"role": "assistant", "content": [{"type": "text", "text": text}]},
        usage=Usage(input_tokens=usage[0], output_tokens=usage[1]), turns=turns, cost_usd=cost)))


def ask(d: Driver, tool_use_id: str = "toolu_1", name: str = "Bash", attempt: int = 0) -> object:
    req = ExecutorPermission(session_id=d.state.session_id, run_id=d.run.run_id, step_id=d.pending, turn=1,
                             checkpoint_id=f"{d.run.run_id}-{tool_use_id}", tool_use_id=tool_use_id, name=name,
                             input={"command": "touch x"}, attempt=attempt)
    return d.apply(i.PermissionInput(input_id=f"permission:{req.checkpoint_id}:{attempt}", request=req))


@pytest.mark.parametrize("name", ["claude_code", "opencode", "codex", "acp"])
def test_executor_profiles_follow_the_seed(name: str) -> None:
    profile = PROFILES[name]
    assert profile.executor == ("acp" if name == "acp" else "cli")
    assert profile.pipeline == (ACP_PIPELINE if name == "acp" else CLI_PIPELINE)
    assert ("ToolExecutor" in profile.pipeline) == (name != "acp")
    assert [s.name for s in profile.stages] == ["executor_stop", "commitment_gate", "routing"]


def test_each_step_names_the_agent_its_permissions_and_what_is_left() -> None:
    d = Driver(CoreConfig(default_model="m1", default_max_tokens=1000, tool_policy={"Write": "approve"}, prices=PRICES))
    d.start(profile="acp", executor={"agent": "zed"}, tool_permissions={"Bash": "deny", "Write": "auto"},
            limits={"max_turns": 7, "max_cost_usd": 1.0, "max_total_tokens": 5000, "compaction_at_pct": 0.5})
    spec = d.work()["executor"]
    assert spec["profile"] == "acp" and spec["agent"] == "zed" and spec["workspace"] is None
    # the operator's policy is the floor: the run's `auto` for Write does not loosen it
    assert spec["permissions"] == {"Bash": "deny", "Write": "approve"}
    assert (spec["max_turns"], spec["max_cost_usd"], spec["max_total_tokens"]) == (7, 1.0, 5000)
    assert spec["compaction_at_pct"] == 0.5
    agent_answer(d, "Let me check the files.", turns=3, cost=0.25)  # announces only: nudged
    again = d.work()["executor"]
    assert again["max_turns"] == 4 and again["max_cost_usd"] == 0.75 and again["max_total_tokens"] == 4890
    assert d.history[-1]["role"] == "user" and "ended your turn" in d.history[-1]["content"][0]["text"]


def test_the_agents_turns_and_reported_cost_are_the_runs() -> None:
    d = Driver()
    d.start(profile="claude_code", model={"primary": "not-priced-anywhere"})
    agent_answer(d, "Done: the file is there.", turns=4, cost=0.125)
    ended = d.ended()
    assert ended["status"] == "completed" and ended["turns"] == 4 and ended["cost_usd"] == 0.125
    assert ended["final_text"] == "Done: the file is there."
    assert not d.of("warning")  # the agent priced it: no unknown_price warning


def test_ordinary_profiles_carry_no_executor() -> None:
    d = Driver()
    d.start(profile="agentic")
    assert d.work()["executor"] is None


@pytest.mark.parametrize(("stop", "status", "reason"), [("max_turns", "max_turns", "max_turns"),
                                                         ("budget", "budget_exhausted", "max_cost_usd")])
def test_an_agent_stopped_at_a_limit_ends_the_run_with_that_status(stop: str, status: str, reason: str) -> None:
    d = Driver()
    d.start(profile="claude_code", limits={"max_turns": 3, "max_cost_usd": 5.0})
    agent_answer(d, "Let me keep going.", turns=3, stop=stop)
    ended = d.ended()
    assert (ended["status"], ended["reason"]) == (status, reason) and ended["final_text"] == "Let me keep going."


def test_a_permission_request_is_a_durable_checkpoint_answered_by_decision() -> None:
    d = Driver()
    d.start(profile="claude_code", tool_permissions={"Bash": "approve"})
    step = d.pending
    opened = ask(d)
    (req,) = d.of("approval.requested", opened)
    assert req["checkpoint_id"] == "run1-toolu_1" and req["source"] == "executor"
    assert req["tool_calls"] == [{"tool_use_id": "toolu_1", "name": "Bash", "input": {"command": "touch x"}}]
    assert d.state.status == "awaiting_approval" and d.pending == step  # the agent's step goes on
    assert ask(d, attempt=1).state is None  # asked again while open: nothing new
    decided = d.decision("run1-toolu_1", "deny", note="not today")
    (notice,) = d.notices(decided)
    assert notice.notice == "permission" and notice.body["decision"] == "deny" and notice.body["note"] == "not today"
    assert d.state.status == "running" and d.pending == step
    again = ask(d, attempt=2)  # the llm service did not hear it: the same answer again
    assert again.state is None and d.notices(again)[0].body["decision"] == "deny"
    agent_answer(d, "I could not run it.")
    assert d.ended()["status"] == "completed"


def test_a_request_of_an_abandoned_step_is_ignored_and_an_ended_step_closes_its_checkpoint() -> None:
    d = Driver()
    d.start(profile="claude_code", tool_permissions={"Bash": "approve"})
    ask(d)
    d.steer("do something else")  # withdraws the checkpoint, abandons the step
    assert d.state.status == "running" and d.run.approvals.checkpoint is None
    stale = ExecutorPermission(session_id="s1", run_id="run1", step_id="run1:g1", checkpoint_id="run1-toolu_9",
                               tool_use_id="toolu_9", name="Bash")
    assert d.apply(i.PermissionInput(input_id="permission:x:0", request=stale)).effects == []
    ask(d, "toolu_2")
    assert d.state.status == "awaiting_approval"
    agent_answer(d, "The agent ended its turn anyway.")  # e.g. its process failed
    assert d.state.status == "idle" and d.ended()["status"] == "completed"


def test_a_follow_up_on_an_idle_session_keeps_the_agent_and_workspace() -> None:
    d = Driver(CFG)
    d.apply(i.StartInput(input_id="in:1", new_id="run1", workspace_path="/srv/ws/a",
                         body=StartRun.model_validate({"input": "hi", "profile": "claude_code"})))
    assert d.work()["executor"]["workspace"] == "/srv/ws/a"
    agent_answer(d, "Hello.")
    d.message("and now?")
    spec = d.work()["executor"]
    assert spec["profile"] == "claude_code" and spec["workspace"] == "/srv/ws/a"
