"""Profiles as data: transition tables, defaults, turn_by_turn and agentic_planned,
through the router's pure core."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from loopwire.router import inputs as i
from loopwire.router import planning, subagent, workspace
from loopwire.router.phases import IllegalTransition, change_phase, check_transition
from loopwire.router.profiles import PROFILES, get_profile
from loopwire.router.state import RunConfig, RunState
from loopwire.shared.contract.protocol import StartRun
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit

TABLES = {
    "agentic": {},
    "conversational": {},
    "agentic_planned": {"plan": {"execute"}, "execute": {"verify"}, "verify": {"done"}},
    # the defaults table of docs/profiles.md
    "turn_by_turn": {"review": {"review", "execute"}, "execute": {"review", "done"}},
}


def phases(d: Driver) -> list[tuple[str, str]]:
    return [(f["from"], f["to"]) for f in d.of("phase.changed")]


# -- the tables -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_allowed_move_passes_and_every_other_move_raises(name: str) -> None:
    profile = get_profile(name)
    assert {k: set(v) for k, v in profile.transitions.items()} == TABLES[name]
    for frm in profile.phases:
        for to in profile.phases:
            if to in TABLES[name].get(frm, set()):
                check_transition(name, frm, to)
            else:
                with pytest.raises(IllegalTransition):
                    check_transition(name, frm, to)


def test_change_phase_moves_the_run_and_says_so() -> None:
    run = RunState(run_id="r", config=RunConfig(profile="agentic_planned", models=["m"], max_tokens=10),
                   profile_phase="plan")
    spec = change_phase(run, "execute")
    assert (spec.kind, spec.fields) == ("phase.changed", {"from": "plan", "to": "execute"})
    assert run.profile_phase == "execute" and run.phase_changes == 1
    with pytest.raises(IllegalTransition):
        change_phase(run, "done")  # execute -> done skips verify


def test_profile_defaults_and_limits_overrides() -> None:
    assert {n: (p.max_turns, p.compaction_at_pct, p.progress_injection) for n, p in PROFILES.items() if p.implemented} \
        == {"agentic": (50, 0.8, "system_reminder"), "agentic_planned": (100, 0.8, "system_reminder"),
            "turn_by_turn": (200, 0.8, "none"), "conversational": (100, 0.8, "none"),
            **{n: (50, 0.8, "system_reminder") for n in ("claude_code", "opencode", "codex", "acp")}}
    d = Driver()
    d.start(profile="turn_by_turn")
    assert (d.run.config.max_turns, d.run.config.compaction_at_pct) == (200, 0.8)
    d2 = Driver()
    d2.start(profile="turn_by_turn", limits={"max_turns": 7, "compaction_at_pct": 0.5})
    assert (d2.run.config.max_turns, d2.run.config.compaction_at_pct) == (7, 0.5)


def test_agentic_offers_the_finish_tool_and_changes_no_phase() -> None:
    d = Driver()
    d.start(input="hi", tools=["add"])
    assert [t["name"] for t in d.work()["extra_tools"]] == ["finish_agentic_task"]
    assert d.run.profile_phase == "act"
    d.answer(call("t1"))
    d.tools()
    d.answer("3")
    assert d.of("phase.changed") == []
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
    assert phases(d) == [("review", "execute"), ("execute", "done")], "approved, the answer is carried out"
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
    assert phases(d) == [("review", "review")]


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
    assert phases(d) == [("review", "execute")] and d.run.profile_phase == "execute"
    assert d.work()["kind"] == "memory.assemble"
    d.answer("Now I multiply.", call("t3", "mul"))
    assert phases(d)[-1] == ("execute", "review") and len(d.of("approval.requested")) == 2
    d.decision(d.of("approval.requested")[-1]["checkpoint_id"], "approve")
    d.tools("6")
    d.answer("The result is 6.")
    d.decision(d.of("approval.requested")[-1]["checkpoint_id"], "approve")
    assert phases(d) == [("review", "execute"), ("execute", "review"), ("review", "execute"),
                         ("execute", "review"), ("review", "execute"), ("execute", "done")]
    assert d.ended()["status"] == "completed" and d.ended()["final_text"] == "The result is 6."


def test_turn_by_turn_tool_proposal_denied_stays_in_review() -> None:
    d = Driver()
    d.start(profile="turn_by_turn", input="add")
    d.answer(call("t1"))
    out = d.decision(d.of("approval.requested")[0]["checkpoint_id"], "deny", note="use mul")
    assert d.work(out)["denied"] == {"t1": "denied by the user: use mul"}
    d.tools("denied", is_error=True)
    assert phases(d) == [("review", "review")] and d.run.profile_phase == "review"
    d.answer(call("t2", "mul"))
    assert len(d.of("approval.requested")) == 2 and phases(d) == [("review", "review")]


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


# -- agentic_planned --------------------------------------------------------------------------
def update_plan(tid: str, *steps: tuple[str, str]) -> dict[str, Any]:
    return call(tid, "update_plan", {"plan": [{"step": s, "status": st} for s, st in steps]})


def test_planned_generated_plan_tracked_then_verified() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="add 1 and 2, then double it", tools=["add", "mul"])
    env = d.work()
    assert d.run.profile_phase == "plan"
    assert env["tools"] == [] and [t["name"] for t in env["extra_tools"]] == ["update_plan"]
    assert any("Phase: plan" in n and "add, mul" in n for n in env["ephemeral_notes"])

    d.answer(update_plan("p1", ("add 1 and 2", "pending"), ("double it", "pending")))
    assert d.work()["kind"] == "memory.assemble", "the plan call is answered by the core: no tool hop"
    assert "Plan recorded (2 steps)" in d.history[-1]["content"][0]["content"]
    assert d.run.profile_phase == "execute"
    env = d.work()
    assert env["tools"] == ["add", "mul"]
    assert [t["name"] for t in env["extra_tools"]] == ["update_plan", "finish_agentic_task"]
    assert any("[pending] add 1 and 2" in n for n in env["ephemeral_notes"])

    out = d.answer(call("t1", "add"), update_plan("p2", ("add 1 and 2", "completed"), ("double it", "pending")))
    assert [c["tool_use_id"] for c in d.work(out)["calls"]] == ["t1"], "update_plan never reaches the tools service"
    d.tools("3")
    assert [b["tool_use_id"] for b in d.history[-1]["content"]] == ["t1", "p2"], "results in the model's order"
    d.answer(call("t2", "mul", {"a": 3, "b": 2}), update_plan("p3", ("add 1 and 2", "completed"),
                                                               ("double it", "completed")))
    assert d.run.profile_phase == "verify"
    d.tools("6")
    assert "verify" in d.history[-1]["content"][1]["content"]
    d.answer("Checked: 1 + 2 = 3, doubled is 6. The answer is 6.")
    ended = d.ended()
    assert ended["status"] == "completed" and ended["final_text"].endswith("The answer is 6.")
    assert phases(d) == [("plan", "execute"), ("execute", "verify"), ("verify", "done")]
    updates = d.of("plan.updated")
    assert [u["source"] for u in updates] == ["model", "model", "model", "verification"]
    assert updates[-1]["verification"].startswith("Checked")
    assert d.state.plan is not None and d.state.plan["phase"] == "done"
    assert [s["status"] for s in d.state.plan["steps"]] == ["completed", "completed"]


def test_planned_prebuilt_plan_skips_to_execute() -> None:
    d = Driver()
    out = d.start(profile="agentic_planned", input="go", plan=["read", {"title": "write", "status": "done"}])
    assert d.kinds(out)[:3] == ["run.started", "phase.changed", "plan.updated"]
    assert d.run.profile_phase == "execute"
    assert d.run.plan == [{"step": "read", "status": "pending"}, {"step": "write", "status": "completed"}]
    assert d.of("plan.updated")[0]["source"] == "start"


def test_planned_text_plan_is_parsed_and_a_missing_plan_is_asked_for_once() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="do it")
    d.answer("My plan:\n1. look\n2. fix")
    assert d.run.plan == [{"step": "look", "status": "pending"}, {"step": "fix", "status": "pending"}]
    assert d.run.profile_phase == "execute"

    d2 = Driver()
    d2.start(profile="agentic_planned", input="do it")
    d2.answer("Sure thing.")
    assert "update_plan" in d2.history[-1]["content"][0]["text"] and d2.run.profile_phase == "plan"
    d2.answer("Okay then.")
    assert d2.run.plan == [{"step": "do it", "status": "pending"}]
    assert d2.of("plan.updated")[0]["source"] == "fallback"


def test_planned_plan_phase_rejects_other_tools_and_end_of_execute_goes_to_verify() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="x", plan=["only step"])
    d.answer("All done I think.")
    assert "not completed yet: only step" in d.history[-1]["content"][0]["text"], "one nudge"
    d.answer("Really done.")
    assert d.run.profile_phase == "verify"
    d2 = Driver()
    d2.start(profile="agentic_planned", input="x")
    out = d2.answer(call("t1", "add"))
    assert d2.work(out)["denied"] == {"t1": "tool 'add' is not available in the plan phase"}


def test_plan_parsing_shapes() -> None:
    assert planning.parse_plan({"steps": ["a", {"step": "b", "status": "in progress"}]}) == [
        {"step": "a", "status": "pending"}, {"step": "b", "status": "in_progress"}]
    assert planning.parse_plan_text("intro\n- one\n* two\nStep 3: three\nnot a step") == [
        {"step": "one", "status": "pending"}, {"step": "two", "status": "pending"},
        {"step": "three", "status": "pending"}]
    assert planning.parse_plan(42) == []


# -- the workspace snapshot -------------------------------------------------------------------
def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e", "PATH": "/usr/bin:/bin", "HOME": str(path)})


def test_workspace_snapshot_inside_the_operator_roots(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "node_modules" / "junk").mkdir(parents=True)
    (repo / "src" / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "AGENTS.md").write_text("Run make test before committing.\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first commit")
    (repo / "new.txt").write_text("untracked\n")
    (repo / "src" / "pkg" / "a.py").write_text("x = 2\n")
    roots = [str(tmp_path)]
    path, refusal = workspace.resolve_workspace({"workspace": "repo"}, roots)  # relative to a root
    assert refusal is None and path == repo.resolve()
    snap = workspace.gather(path, roots)
    assert snap["git"]["branch"] == "main"
    assert snap["git"]["status"] == [" M src/pkg/a.py", "?? new.txt"]
    assert snap["git"]["commits"][0].endswith("first commit")
    assert "src/pkg/a.py" in snap["tree"] and not any("node_modules" in e for e in snap["tree"])
    assert snap["instructions"]["AGENTS.md"].startswith("Run make test")
    note = workspace.render(snap)
    assert "Git branch: main" in note and "--- AGENTS.md ---" in note
    assert workspace.resolve_workspace({}, roots) == (None, None)


def test_a_workspace_outside_the_operator_roots_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "ok").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret")
    roots = [str(root)]
    for named in ("..", str(tmp_path), "ok/../..", "escape", str(root / "escape"), "/etc", "missing", 7):
        path, refusal = workspace.resolve_workspace({"workspace": named}, roots)
        assert path is None and refusal, named
    # The client's own roots never widen the operator's; they may narrow them.
    assert workspace.resolve_workspace({"workspace": "/etc", "allowed_roots": ["/"]}, roots)[0] is None
    assert workspace.resolve_workspace({"workspace": "ok", "allowed_roots": [str(tmp_path / "secret")]},
                                       roots)[0] is None
    assert workspace.resolve_workspace({"workspace": "ok", "allowed_roots": [str(root)]}, roots)[0] == root / "ok"
    for unusable in ("ok\x00", "a" * 5000, "ok/" + "b" * 300):
        path, refusal = workspace.resolve_workspace({"workspace": unusable}, roots)
        assert path is None and refusal, unusable[:20]
    assert workspace.resolve_workspace({"workspace": "ok", "allowed_roots": ["\x00"]}, roots)[0] is None
    # No operator roots: no workspace at all.
    path, refusal = workspace.resolve_workspace({"workspace": str(root / "ok")}, [])
    assert path is None and "LOOPWIRE_WORKSPACE_ROOTS" in (refusal or "")


def test_a_link_out_of_the_roots_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "private.txt").write_text("the operator's secret\n")
    (root / "AGENTS.md").symlink_to(tmp_path / "private.txt")
    snap = workspace.gather(root, [str(root)])
    assert "AGENTS.md" not in snap["instructions"]
    assert "secret" not in workspace.render(snap)


def test_reading_a_malicious_repository_runs_nothing(tmp_path: Path) -> None:
    """The repository's own config names commands git would run while reading it
    (core.fsmonitor on `git status`, a clean filter on a file whose stat changed, hooks):
    the snapshot is read and none of them runs."""
    repo = tmp_path / "evil"
    repo.mkdir()
    marker = tmp_path / "pwned"
    script = tmp_path / "payload.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {script}\n\thooksPath = {tmp_path}\n\tpager = {script}\n"
                     f"[filter \"evil\"]\n\tclean = {script}\n\tprocess = {script}\n"
                     f"[diff]\n\texternal = {script}\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "a.txt").write_text("two\n")  # a changed file: git would run the clean filter on it
    # git itself would run the payload on `git status` (the attack is real):
    probe = subprocess.run(["git", "-C", str(repo), "status", "--short"], capture_output=True, check=False,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert marker.exists(), probe.stderr
    marker.unlink()
    path, refusal = workspace.resolve_workspace({"workspace": "evil"}, [str(tmp_path)])
    assert refusal is None and path is not None
    snap = workspace.gather(path, [str(tmp_path)])
    assert " M a.txt" in snap["git"]["status"] and snap["git"]["commits"][0].endswith("init")
    assert not marker.exists()


def test_a_refused_workspace_starts_no_run() -> None:
    d = Driver()
    out = d.apply(i.StartInput(input_id="in:1", new_id="run1", workspace_refusal="outside the roots",
                               body=StartRun(input="x", metadata={"workspace": "/etc"})))
    assert out.state is None and not d.of("run.started", out)
    assert d.of("error", out)[0]["code"] == "workspace_not_allowed"


def test_the_snapshot_is_the_plan_phase_note() -> None:
    d = Driver()
    d.apply(i.StartInput(input_id="in:1", new_id="run1", body=StartRun(input="x", profile="agentic_planned"),
                         workspace={"path": "/w", "tree": ["a.py"], "instructions": {"README.md": "hello"}}))
    note = next(n for n in d.work()["ephemeral_notes"] if "Phase: plan" in n)
    assert "Workspace: /w" in note and "a.py" in note and "hello" in note


# -- subagent depth -----------------------------------------------------------------------------
def child(depth_claimed: int | None = None, parent_depth: int | None = None) -> i.StartInput:
    meta: dict[str, Any] = {"parent_session_id": "p1", "parent_tool_use_id": "tu1"}
    if depth_claimed is not None:
        meta["subagent_depth"] = depth_claimed
    return i.StartInput(input_id="in:1", new_id="c1", body=StartRun(input="sub task", metadata=meta),
                        parent_depth=parent_depth)


def test_a_child_run_tracks_its_depth_from_the_parent() -> None:
    d = Driver()
    out = d.apply(child(depth_claimed=1, parent_depth=1))
    started = d.of("run.started", out)[0]
    assert (started["parent_session_id"], started["parent_tool_use_id"], started["subagent_depth"]) == ("p1", "tu1", 2)
    assert d.run.config.subagent_depth == 2


def test_a_start_beyond_the_depth_limit_is_an_error() -> None:
    d = Driver()
    out = d.apply(child(depth_claimed=1, parent_depth=3))  # the parent's depth wins over the claim
    assert out.state is None and d.of("error", out)[0]["code"] == "subagent_depth_exceeded"
    out = Driver().apply(child(depth_claimed=4))  # unknown parent: the claim counts
    assert out.state is None
    assert subagent.child_depth({}, None, 5) == 0, "not a child run"


def test_the_parent_may_come_from_the_forwarded_call_headers() -> None:
    headers = subagent.child_headers("p1", "tu1")
    assert subagent.parent_of({}, headers) == "p1"
    assert subagent.parent_of({"parent_session_id": "p0"}, headers) == "p0"
    d = Driver()
    out = d.apply(i.StartInput(input_id="in:1", new_id="c1", body=StartRun(input="sub task"),
                               parent_session_id="p1", parent_depth=3))
    assert d.of("error", out)[0]["code"] == "subagent_depth_exceeded", "no metadata, the header still counts"
    d.apply(i.StartInput(input_id="in:2", new_id="c2", body=StartRun(input="sub task"),
                         parent_session_id="p1", parent_depth=0))
    assert d.run.config.subagent_depth == 1 and d.of("run.started")[-1]["parent_session_id"] == "p1"


def test_a_child_session_keeps_its_depth_when_started_again_without_the_fields() -> None:
    d = Driver()
    d.apply(child(parent_depth=2))  # input in:1
    d._seq = 1
    assert d.run.config.subagent_depth == 3
    d.answer("done")
    d.start(run_id="again")  # no parent_session_id, no header: the session's record counts
    assert d.run.config.subagent_depth == 3
    d.answer("done")
    out = d.apply(i.StartInput(input_id="in:9", new_id="deeper", body=StartRun(input="x"),
                               parent_session_id="p1", parent_depth=3))
    assert d.of("error", out)[0]["code"] == "subagent_depth_exceeded"


def test_child_start_body_is_a_valid_start_run() -> None:
    body = subagent.child_start("p1", "tu1", 0, "look into it", profile="agentic", metadata={"k": "v"})
    start = StartRun.model_validate(body)
    assert start.metadata == {"k": "v", "parent_session_id": "p1", "parent_tool_use_id": "tu1", "subagent_depth": 1}
