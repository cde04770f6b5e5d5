"""WorkspaceSnapshot: what an agentic_planned run knows of its workspace before it plans.

When StartRun `metadata.workspace` names a directory inside one of
`metadata.allowed_roots` (both resolved, symlinks followed, so `..` cannot escape), the
router's shell gathers, once, at the start of the run (`gather`, I/O, in a thread):

- git: the branch, `git status --short` and the latest commits (`git log --oneline`),
  each bounded; nothing when the directory is not a git work tree or git is missing;
- a file tree: breadth-first, sorted, at most `MAX_DEPTH` levels and `MAX_ENTRIES`
  entries, without VCS, dependency and cache directories;
- instruction files at the root: AGENTS.md, CLAUDE.md, README(.md/.rst/.txt), each cut
  to `MAX_FILE_CHARS`.

The snapshot is data (a dict) passed into the core with the start input; the core
renders it (`render`, pure) into the plan phase's note. A workspace outside the allowed
roots, or missing, yields `{"error": ...}`: the run goes on without a snapshot and the
note says why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

MAX_DEPTH = 3
MAX_ENTRIES = 200
MAX_FILE_CHARS = 4000
MAX_STATUS_LINES = 40
MAX_COMMITS = 5
GIT_TIMEOUT_S = 5.0
INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md", "README.md", "README.rst", "README.txt", "README")
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".tox", "dist", "build", ".idea", ".vscode"})


def inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def resolve_workspace(metadata: dict[str, Any]) -> tuple[Path | None, str | None]:
    """The workspace directory, or the reason there is none."""
    workspace = metadata.get("workspace")
    if not isinstance(workspace, str) or not workspace:
        return None, None
    roots_raw = metadata.get("allowed_roots")
    if isinstance(roots_raw, str):
        roots_raw = [roots_raw]
    if not isinstance(roots_raw, list) or not roots_raw:
        return None, "metadata.allowed_roots is missing: the workspace is not read"
    roots = [Path(os.path.realpath(r)) for r in roots_raw if isinstance(r, str) and r]
    path = Path(os.path.realpath(workspace))
    if not inside(path, roots):
        return None, f"the workspace {workspace} is outside metadata.allowed_roots"
    if not path.is_dir():
        return None, f"the workspace {workspace} is not a directory"
    return path, None


def _git(path: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _tree(root: Path) -> tuple[list[str], bool]:
    entries: list[str] = []
    level = [root]
    for _depth in range(MAX_DEPTH):
        following: list[Path] = []
        for directory in level:
            try:
                children = sorted(directory.iterdir(), key=lambda p: p.name)
            except OSError:
                continue
            for child in children:
                if child.name in SKIP_DIRS:
                    continue
                if len(entries) >= MAX_ENTRIES:
                    return entries, True
                is_dir = child.is_dir() and not child.is_symlink()
                entries.append(str(child.relative_to(root)) + ("/" if is_dir else ""))
                if is_dir:
                    following.append(child)
        level = following
    return entries, False


def gather(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The snapshot of `metadata.workspace` (blocking I/O: run it in a thread)."""
    path, problem = resolve_workspace(metadata)
    if problem is not None:
        return {"error": problem}
    if path is None:
        return None
    snapshot: dict[str, Any] = {"path": str(path)}
    if _git(path, "rev-parse", "--is-inside-work-tree") == "true":
        status = _git(path, "status", "--short") or ""
        lines = status.splitlines()
        snapshot["git"] = {
            "branch": _git(path, "rev-parse", "--abbrev-ref", "HEAD"),
            "status": lines[:MAX_STATUS_LINES], "status_truncated": len(lines) > MAX_STATUS_LINES,
            "commits": (_git(path, "log", "--oneline", f"-n{MAX_COMMITS}") or "").splitlines(),
        }
    snapshot["tree"], snapshot["tree_truncated"] = _tree(path)
    files: dict[str, str] = {}
    for name in INSTRUCTION_FILES:
        candidate = path / name
        if candidate.is_file():
            try:
                text = candidate.read_text(errors="replace")
            except OSError:
                continue
            files[name] = text[:MAX_FILE_CHARS] + ("\n[...]" if len(text) > MAX_FILE_CHARS else "")
    snapshot["instructions"] = files
    return snapshot


def render(snapshot: dict[str, Any] | None) -> str:
    """The snapshot as the plan phase's note (pure)."""
    if not snapshot:
        return ""
    if "error" in snapshot:
        return f"Workspace: not available ({snapshot['error']})."
    parts = [f"Workspace: {snapshot.get('path', '?')}"]
    git = snapshot.get("git")
    if git:
        parts.append(f"Git branch: {git.get('branch') or '?'}")
        status = git.get("status") or []
        parts.append("Git status:\n" + ("\n".join(status) if status else "(clean)")
                     + ("\n[...]" if git.get("status_truncated") else ""))
        if git.get("commits"):
            parts.append("Recent commits:\n" + "\n".join(git["commits"]))
    tree = snapshot.get("tree") or []
    parts.append("Files:\n" + "\n".join(tree) + ("\n[... more files]" if snapshot.get("tree_truncated") else ""))
    for name, text in (snapshot.get("instructions") or {}).items():
        parts.append(f"--- {name} ---\n{text}")
    return "\n\n".join(parts)
