"""The workspace snapshot of the plan phase: inside the operator's roots only, links out of
them not read, a malicious repository running nothing, a refused workspace starting no run."""

import subprocess
from pathlib import Path

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core import workspace
from loopwire.router.shell import workspace_snapshot
from loopwire.shared.contract.protocol import StartRun
from tests.router_driver import Driver

pytestmark = pytest.mark.unit


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
    path, refusal = workspace_snapshot.resolve_workspace({"workspace": "repo"}, roots)  # relative to a root
    assert refusal is None and path == repo.resolve()
    snap = workspace_snapshot.gather(path, roots)
    assert snap["git"]["branch"] == "main"
    assert snap["git"]["status"] == [" M src/pkg/a.py", "?? new.txt"]
    assert snap["git"]["commits"][0].endswith("first commit")
    assert "src/pkg/a.py" in snap["tree"] and not any("node_modules" in e for e in snap["tree"])
    assert snap["instructions"]["AGENTS.md"].startswith("Run make test")
    note = workspace.render(snap)
    assert "Git branch: main" in note and "--- AGENTS.md ---" in note
    assert workspace_snapshot.resolve_workspace({}, roots) == (None, None)


def test_a_workspace_outside_the_operator_roots_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "ok").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret")
    roots = [str(root)]
    for named in ("..", str(tmp_path), "ok/../..", "escape", str(root / "escape"), "/etc", "missing", 7):
        path, refusal = workspace_snapshot.resolve_workspace({"workspace": named}, roots)
        assert path is None and refusal, named
    # The client's own roots never widen the operator's; they may narrow them.
    assert workspace_snapshot.resolve_workspace({"workspace": "/etc", "allowed_roots": ["/"]}, roots)[0] is None
    assert workspace_snapshot.resolve_workspace({"workspace": "ok", "allowed_roots": [str(tmp_path / "secret")]},
                                       roots)[0] is None
    assert workspace_snapshot.resolve_workspace({"workspace": "ok", "allowed_roots": [str(root)]}, roots)[0] == root / "ok"
    for unusable in ("ok\x00", "a" * 5000, "ok/" + "b" * 300):
        path, refusal = workspace_snapshot.resolve_workspace({"workspace": unusable}, roots)
        assert path is None and refusal, unusable[:20]
    assert workspace_snapshot.resolve_workspace({"workspace": "ok", "allowed_roots": ["\x00"]}, roots)[0] is None
    # No operator roots: no workspace at all.
    path, refusal = workspace_snapshot.resolve_workspace({"workspace": str(root / "ok")}, [])
    assert path is None and "LOOPWIRE_WORKSPACE_ROOTS" in (refusal or "")


def test_a_link_out_of_the_roots_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "private.txt").write_text("the operator's secret\n")
    (root / "AGENTS.md").symlink_to(tmp_path / "private.txt")
    snap = workspace_snapshot.gather(root, [str(root)])
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
    path, refusal = workspace_snapshot.resolve_workspace({"workspace": "evil"}, [str(tmp_path)])
    assert refusal is None and path is not None
    snap = workspace_snapshot.gather(path, [str(tmp_path)])
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


SNAPSHOT = {"path": "/w", "tree": ["a.py"], "instructions": {"AGENTS.md": "Run make test first."}}


def notes_of(d: Driver) -> str:
    return "\n".join(d.work()["ephemeral_notes"])


def test_every_planned_phase_keeps_the_snapshot_until_a_tool_ran() -> None:
    d = Driver()
    d.apply(i.StartInput(input_id="in:1", new_id="run1", workspace=SNAPSHOT,
                         body=StartRun(input="x", profile="agentic_planned", tools=["add"])))
    assert d.run.profile_phase == "plan" and notes_of(d).count("Run make test first.") == 1
    d.answer("1. look\n2. report")
    assert d.run.profile_phase == "execute" and "Run make test first." in notes_of(d)
    d.answer({"type": "tool_use", "id": "p1", "name": "update_plan",
              "input": {"plan": [{"step": "look", "status": "completed"}, {"step": "report", "status": "completed"}]}})
    assert d.run.profile_phase == "verify" and "Run make test first." in notes_of(d), \
        "update_plan is the core's own tool: nothing in the workspace changed"
    d.answer({"type": "tool_use", "id": "t1", "name": "add", "input": {}})
    d.tools()
    assert "Run make test first." not in notes_of(d), "a tool ran: the snapshot may be stale"


def test_a_run_started_with_a_plan_sees_the_snapshot() -> None:
    d = Driver()
    d.apply(i.StartInput(input_id="in:1", new_id="run1", workspace=SNAPSHOT,
                         body=StartRun(input="x", profile="agentic_planned", plan=[{"step": "look"}])))
    assert d.run.profile_phase == "execute" and "Run make test first." in notes_of(d)
