"""WorkspaceSnapshot: what an agentic_planned run knows of its workspace before it plans,
read by the shell.

Where a workspace may be is the operator's decision: `LOOPWIRE_WORKSPACE_ROOTS`
(`RouterSettings.workspace_roots`). StartRun `metadata.workspace` (any profile) names a
directory relative to a root or absolute inside one; it is resolved with every symlink
followed (so neither `..` nor a link can leave the roots) and must be an existing
directory inside a root, or the start is refused with `error` `workspace_not_allowed`
(`resolve_workspace`). With no roots configured no run may name a workspace. A client's
`metadata.allowed_roots` can only narrow this: when given, the workspace must lie inside
one of those as well.

For an agentic_planned run the router's shell then gathers, once, at the start of the
run (`gather`, I/O, in a thread):

- git: the branch, the status (in `git status --short`'s format) and the latest commits,
  each bounded, read with dulwich (a library that reads the repository's files): no git
  process runs, so nothing the repository configures (`core.fsmonitor`, hooks, filter
  drivers, pagers) is ever executed. The repository must lie inside the roots too;
- a file tree: breadth-first, sorted, at most `MAX_DEPTH` levels and `MAX_ENTRIES`
  entries, without VCS, dependency and cache directories, not following links;
- instruction files at the root: AGENTS.md, CLAUDE.md, README(.md/.rst/.txt), each cut
  to `MAX_FILE_CHARS`, read only when they resolve inside the roots.

The snapshot is data (a dict) passed into the core with the start input; the core
renders it (`render`, core/workspace.py) into the plan phase's note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

MAX_DEPTH = 3
MAX_ENTRIES = 200
MAX_FILE_CHARS = 4000
MAX_STATUS_LINES = 40
MAX_COMMITS = 5
GATHER_TIMEOUT_S = 10.0
"""How long the shell waits for a snapshot before the run starts without one."""
INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md", "README.md", "README.rst", "README.txt", "README")
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".tox", "dist", "build", ".idea", ".vscode"})
WORKSPACE_KEY = "workspace"
CLIENT_ROOTS_KEY = "allowed_roots"


def inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def names_workspace(metadata: dict[str, Any]) -> bool:
    return WORKSPACE_KEY in metadata and metadata[WORKSPACE_KEY] not in (None, "")


def resolve_workspace(metadata: dict[str, Any], operator_roots: list[str]) -> tuple[Path | None, str | None]:
    """The workspace directory `metadata` names, or why it is refused: (None, None) when
    it names none. `operator_roots`: LOOPWIRE_WORKSPACE_ROOTS."""
    try:
        return _resolve(metadata, operator_roots)
    except (OSError, ValueError) as exc:
        # A path the OS cannot take (a NUL byte, a name too long) is refused like any
        # other, never an exception that would make the start fail on every delivery.
        return None, f"the workspace is not a usable path ({type(exc).__name__})"


def _resolve(metadata: dict[str, Any], operator_roots: list[str]) -> tuple[Path | None, str | None]:
    if not names_workspace(metadata):
        return None, None
    workspace = metadata[WORKSPACE_KEY]
    if not isinstance(workspace, str):
        return None, "metadata.workspace must be a string (a path)"
    roots = [_real(r) for r in operator_roots if r.strip()]
    if not roots:
        return None, ("this deployment allows no workspace (the operator has set no "
                      "LOOPWIRE_WORKSPACE_ROOTS)")
    client_raw = metadata.get(CLIENT_ROOTS_KEY)
    if isinstance(client_raw, str):
        client_raw = [client_raw]
    narrowed = ([_real(r) for r in client_raw if isinstance(r, str) and r]
                if isinstance(client_raw, list) and client_raw else None)
    candidates = [_real(workspace)] if os.path.isabs(workspace) else [_real(root / workspace) for root in roots]
    for path in candidates:
        if not inside(path, roots) or (narrowed is not None and not inside(path, narrowed)):
            continue
        if path.is_dir():
            return path, None
    return None, f"the workspace {workspace!r} is not a directory inside the workspace roots"


def _short(path: bytes | str) -> str:
    return path.decode(errors="replace") if isinstance(path, bytes) else path


def read_git(path: Path, roots: list[Path]) -> dict[str, Any] | None:
    """Branch, status and latest commits of the repository `path` is in, read with dulwich
    (no git process, nothing the repository configures runs); None when there is none
    inside the roots."""
    # dulwich loads with the first run that names a workspace, not with the router.
    from dulwich.errors import NotGitRepository
    from dulwich.index import get_unstaged_changes
    from dulwich.porcelain import get_tree_changes, get_untracked_paths
    from dulwich.repo import Repo

    try:
        repo = Repo.discover(str(path))
    except NotGitRepository:
        return None
    with repo:
        if not inside(_real(repo.path), roots) or not inside(_real(repo.controldir()), roots):
            return None  # a repository above the roots, or a `.git` file pointing out of them
        head = repo.refs.read_ref(cast(Any, b"HEAD")) or b""
        branch = _short(head[len(b"ref: refs/heads/"):]) if head.startswith(b"ref: refs/heads/") else "HEAD"
        index = repo.open_index()
        lines: list[str] = []
        staged = get_tree_changes(repo, index)
        for kind, mark in (("add", "A "), ("delete", "D "), ("modify", "M ")):
            lines += [f"{mark} {_short(p)}" for p in staged[kind]]
        # No filter callback: a filter driver (`filter.<name>.clean`) is a command.
        lines += [f" M {_short(p)}" for p in get_unstaged_changes(index, repo.path, None)]
        lines += [f"?? {_short(p)}" for p in get_untracked_paths(repo.path, repo.path, index,
                                                                 exclude_ignored=True, untracked_files="normal",
                                                                 repo=repo)]
        commits: list[str] = []
        try:
            for entry in repo.get_walker(max_entries=MAX_COMMITS):
                commit = entry.commit
                subject = commit.message.decode(errors="replace").splitlines()
                commits.append(f"{commit.id.decode()[:7]} {subject[0] if subject else ''}")
        except KeyError:
            pass  # no commit yet
        return {"branch": branch, "status": lines[:MAX_STATUS_LINES],
                "status_truncated": len(lines) > MAX_STATUS_LINES, "commits": commits}


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


def gather(path: Path, operator_roots: list[str]) -> dict[str, Any]:
    """The snapshot of the workspace `path` (resolved by `resolve_workspace`; blocking
    I/O: run it in a thread)."""
    roots = [_real(r) for r in operator_roots if r.strip()]
    snapshot: dict[str, Any] = {"path": str(path)}
    git = read_git(path, roots)
    if git is not None:
        snapshot["git"] = git
    snapshot["tree"], snapshot["tree_truncated"] = _tree(path)
    files: dict[str, str] = {}
    for name in INSTRUCTION_FILES:
        candidate = path / name
        if not candidate.is_file() or not inside(_real(candidate), roots):
            continue  # a link to a file outside the roots is not read
        try:
            text = candidate.read_text(errors="replace")
        except OSError:
            continue
        files[name] = text[:MAX_FILE_CHARS] + ("\n[...]" if len(text) > MAX_FILE_CHARS else "")
    snapshot["instructions"] = files
    return snapshot
