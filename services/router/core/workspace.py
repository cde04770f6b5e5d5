"""The WorkspaceSnapshot as the plan phase's note.

The shell gathers the snapshot once, at the start of the run (shell/workspace_snapshot.py,
where the rules of which directory a run may name are); it reaches the core as data in
the start input, and this renders it.
"""

from __future__ import annotations

from typing import Any


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
