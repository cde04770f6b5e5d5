"""Profiles as data: transition tables, defaults and turn_by_turn, through the router's pure
core (agentic_planned: test_planning.py)."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.phases import IllegalTransition, change_phase, check_transition
from loopwire.router.core.profiles import PROFILES
from loopwire.shared.contract.protocol import StartRun
from loopwire.shared.contract.run_state import RunConfig, RunState
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit

ONE_PHASE = {"init": {"execute"}, "execute": {"done"}}
TABLES = {
    # the tables of docs/profiles.md: the designed path, then the moves a run completes by
    # outside it (the finish tool before the verification, a reply cut by max_tokens)
    "agentic": ONE_PHASE,
    "conversational": ONE_PHASE,
    **{name: ONE_PHASE for name in ("claude_code", "opencode", "codex", "acp")},
    "agentic_planned": {"init": {"plan"}, "plan": {"execute", "done"}, "execute": {"execute", "verify", "done"},
                        "verify": {"done"}},
    "turn_by_turn": {"init": {"review"}, "review": {"review", "execute", "done"}, "execute": {"review", "done"}},
}


def phases(d: Driver) -> list[tuple[str, str]]:
    return [(f["from"], f["to"]) for f in d.of("phase.changed")]


# -- the tables -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_allowed_move_passes_and_every_other_move_raises(name: str) -> None:
    profile = PROFILES[name]
    assert {k: set(v) for k, v in profile.transitions.items()} == TABLES[name]
    assert profile.phases[0] == profile.initial_phase == "init" and profile.phases[-1] == "done"
    for frm in profile.phases:
        for to in profile.phases:
            if to in TABLES[name].get(frm, set()):
                check_transition(name, profile.transitions, frm, to=to)
            else:
                with pytest.raises(IllegalTransition):
                    check_transition(name, profile.transitions, frm, to=to)


def test_change_phase_moves_the_run_and_says_so() -> None:
    run = RunState(run_id="r", config=RunConfig(profile="agentic_planned", models=["m"], max_tokens=10),
                   profile_phase="plan")
    transitions = PROFILES["agentic_planned"].transitions
    spec = change_phase(run, "execute", transitions)
    assert (spec.kind, spec.fields) == ("phase.changed", {"from": "plan", "to": "execute"})
    assert run.profile_phase == "execute" and run.phase_changes == 1
    with pytest.raises(IllegalTransition):
        change_phase(run, "plan", transitions)  # a plan is made once, before anything runs


def test_profile_defaults_and_limits_overrides() -> None:
    assert {n: (p.max_turns, p.compaction_at_pct, p.progress_injection) for n, p in PROFILES.items()} \
        == {"agentic": (50, 0.8, "system_reminder"), "agentic_planned": (100, 0.8, "system_reminder"),
            "turn_by_turn": (200, 0.8, "none"), "conversational": (100, 0.8, "none"),
            **{n: (50, 0.8, "system_reminder") for n in ("claude_code", "opencode", "codex", "acp")}}
    d = Driver()
    d.start(profile="turn_by_turn")
    assert (d.run.config.max_turns, d.run.config.compaction_at_pct) == (200, 0.8)
    d2 = Driver()
    d2.start(profile="turn_by_turn", limits={"max_turns": 7, "compaction_at_pct": 0.5})
    assert (d2.run.config.max_turns, d2.run.config.compaction_at_pct) == (7, 0.5)


def test_agentic_offers_the_finish_tool_and_goes_init_execute_done() -> None:
    d = Driver()
    started = d.start(input="hi", tools=["add"])
    assert [t["name"] for t in d.work()["extra_tools"]] == ["finish_agentic_task"]
    assert d.kinds(started)[:2] == ["run.started", "phase.changed"] and d.run.profile_phase == "execute"
    d.answer(call("t1"))
    d.tools()
    ended = d.answer("It is 3.")
    assert phases(d) == [("init", "execute"), ("execute", "done")]
    assert d.kinds(ended)[-2:] == ["phase.changed", "run.ended"], "done, then the end"
    none = Driver()
    none.start(input="hi", tools=[])
    assert none.work()["offer_tools"] is False and none.work()["extra_tools"] == []


# -- turn_by_turn (review ⇄ execute → done) ---------------------------------------------------
def test_turn_by_turn_text_proposal_approved_is_the_answer() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="write a haiku")
    assert d.run.profile_phase == "review"
    d.answer("Old pond, a frog jumps.")
    (fields,) = d.of("approval.requested")
    assert fields["proposal"] == "Old pond, a frog jumps." and "tool_calls" not in fields
    assert d.state.status == "awaiting_approval"
    d.decision(fields["checkpoint_id"], "approve")
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "Old pond, a frog jumps."
    assert phases(d) == [("init", "review"), ("review", "execute"), ("execute", "done")], \
        "approved, the answer is carried out"
    assert len([x for x in d.decisions if x.effects]) and d.work()["step_id"] == "run1:g1", "no new model call"


def test_turn_by_turn_text_proposal_denied_is_another_round_of_review() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="write a haiku")
    d.answer("A bad haiku.")
    d.decision(d.of("approval.requested")[0]["checkpoint_id"], "deny", note="make it about autumn")
    assert d.history[-1]["role"] == "user" and "make it about autumn" in d.history[-1]["content"][0]["text"]
    assert d.work()["kind"] == "memory.assemble" and d.state.status == "running"
    d.answer("Autumn moon.")
    assert len(d.of("approval.requested")) == 2
    assert phases(d) == [("init", "review"), ("review", "review")]


def test_turn_by_turn_tool_proposal_runs_after_approval_and_the_next_proposal_is_reviewed() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="add")
    out = d.answer("I propose to add.", call("t1"), call("t2", inp={"a": 2, "b": 2}))
    (fields,) = d.of("approval.requested")
    assert [c["tool_use_id"] for c in fields["tool_calls"]] == ["t1", "t2"], "every call is reviewed"
    assert [e for e in out.effects if e.type == "work"] == []
    approved = d.decision(fields["checkpoint_id"], "approve")
    assert [c["tool_use_id"] for c in d.work(approved)["calls"]] == ["t1", "t2"]
    d.tools("3")
    assert phases(d) == [("init", "review"), ("review", "execute")] and d.run.profile_phase == "execute"
    assert d.work()["kind"] == "memory.assemble"
    d.answer("Now I multiply.", call("t3", "mul"))
    assert phases(d)[-1] == ("execute", "review") and len(d.of("approval.requested")) == 2
    d.decision(d.of("approval.requested")[-1]["checkpoint_id"], "approve")
    d.tools("6")
    d.answer("Done: it is 6.")
    assert len(d.of("approval.requested")) == 2, "the execute phase's end of turn is no proposal"
    assert phases(d)[-1] == ("execute", "review") and "Phase: review" in d.history[-1]["content"][0]["text"]
    assert d.work()["kind"] == "memory.assemble", "review is re-entered with a new generation"
    d.answer("The result is 6.")
    assert d.of("approval.requested")[-1]["proposal"] == "The result is 6."
    d.decision(d.of("approval.requested")[-1]["checkpoint_id"], "approve")
    assert phases(d) == [("init", "review"), ("review", "execute"), ("execute", "review"), ("review", "execute"),
                         ("execute", "review"), ("review", "execute"), ("execute", "done")]
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "The result is 6.", \
        "the approved proposal is the answer"


def test_turn_by_turn_tool_proposal_denied_stays_in_review() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="add")
    d.answer(call("t1"))
    out = d.decision(d.of("approval.requested")[0]["checkpoint_id"], "deny", note="use mul")
    assert d.work(out)["denied"] == {"t1": "denied by the user: use mul"}
    d.tools("denied", is_error=True)
    assert phases(d) == [("init", "review"), ("review", "review")] and d.run.profile_phase == "review"
    d.answer(call("t2", "mul"))
    assert len(d.of("approval.requested")) == 2 and phases(d) == [("init", "review"), ("review", "review")]


def test_turn_by_turn_asks_a_promise_to_act_before_the_user_sees_it() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="check the disk")
    d.answer("Let me check the disk usage.")
    assert d.of("approval.requested") == [], "the commitment gate nudges first"
    assert "without calling a tool" in d.history[-1]["content"][0]["text"]
    d.answer("Checking.", call("t1", "df", {}))
    assert len(d.of("approval.requested")) == 1


def test_turn_by_turn_shows_the_workspace_until_something_ran() -> None:
    d = Driver()
    d.apply(i.StartInput(input_id="in:0", new_id="run1", body=StartRun(input="fix it", profile="turn_by_turn"),
                         workspace={"path": "/w", "tree": ["a.py"], "git": {"branch": "main", "status": []}}))
    note = d.work()["ephemeral_notes"][0]
    assert note.startswith("Workspace: /w") and "a.py" in note and "Git branch: main" in note
    d.answer(call("t1"))
    d.decision(d.of("approval.requested")[0]["checkpoint_id"], "approve")
    d.tools("ok")
    assert not any(n.startswith("Workspace:") for n in d.work()["ephemeral_notes"]), "stale after a tool ran"


# -- every profile reports its phases from init (docs/profiles.md) -----------------------------
@pytest.mark.parametrize("profile", ["conversational", "claude_code"])
def test_one_phase_profiles_go_init_execute_done(profile: str) -> None:
    d = Driver()
    d.start(profile=profile, input="hello there")
    assert d.run.profile_phase == "execute"
    d.answer("Hello! How can I help?")
    assert phases(d) == [("init", "execute"), ("execute", "done")]
    assert d.ended()["status"] == "completed"


def test_a_run_that_does_not_complete_ends_in_the_phase_it_is_in() -> None:
    d = Driver()
    d.start(input="add", tools=["add"])
    d.answer(call("t1"))
    d.abort()
    assert phases(d) == [("init", "execute")] and d.ended()["status"] == "aborted"


def test_the_finish_tool_completes_a_planned_run_from_execute() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="go", tools=["add"], plan=["the step"])
    d.answer(call("f1", "finish_agentic_task", {"summary": "Did it."}))
    assert phases(d) == [("init", "plan"), ("plan", "execute"), ("execute", "done")]
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "Did it."


@pytest.mark.parametrize("approved_first", [False, True])
def test_turn_by_turn_a_reply_cut_by_max_tokens_ends_the_run_with_what_it_has(approved_first: bool) -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="add", tools=["add"])
    if approved_first:  # the cut reply comes in execute
        d.answer(call("t1"))
        d.decision(d.of("approval.requested")[0]["checkpoint_id"], "approve")
        d.tools("3")
    d.answer("The answer is 3 and here is why: fir", stop="max_tokens")
    ended = d.ended()
    assert (ended["status"], ended["final_text"]) == ("completed", "The answer is 3 and here is why: fir")
    assert len(d.of("approval.requested")) == (1 if approved_first else 0), "no proposal of a cut reply"
    assert phases(d)[-1] == ("execute" if approved_first else "review", "done")


def test_a_run_stored_in_an_older_routers_one_phase_completes_where_it_is() -> None:
    d = Driver()
    d.start(input="hello there")
    d.state.run.profile_phase = "act"  # as a router before `init` stored it
    d.answer("Hello! How can I help?")
    assert d.ended()["status"] == "completed" and phases(d) == [("init", "execute")]
