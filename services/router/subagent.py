"""Subagents: a tool may start a child run, through the same public contract.

A tool (in-process or a NATS provider) publishes a `start` on a session of its own
choosing, with the link to its parent in `metadata`:

    {"parent_session_id": "<the calling session>", "parent_tool_use_id": "<the call>",
     "subagent_depth": <the parent's depth + 1>}

(`child_start` builds that body; the tools service gives every call the headers
`Loopwire-Session-Id` and `Loopwire-Tool-Use-Id`.) The tool follows the child's
`run.ended` on `loopwire.out.<child sid>.run.ended` and returns what it needs as its
result.

The depth is tracked by the router, not trusted from the client: when the parent
session is known, the child's depth is the parent run's depth + 1 (the shell reads the
parent's state and passes its depth in); otherwise the depth the metadata claims (at
least 1). A start deeper than `LOOPWIRE_MAX_SUBAGENT_DEPTH` (default 3) gets an `error`
event `subagent_depth_exceeded` and starts nothing. The depth is kept in the run's config
(`RunConfig.subagent_depth`) and shown in `run.started` (`parent_session_id`,
`parent_tool_use_id`, `subagent_depth`, additions) for a child run.
"""

from __future__ import annotations

from typing import Any

PARENT_SESSION = "parent_session_id"
PARENT_TOOL_USE = "parent_tool_use_id"
DEPTH = "subagent_depth"


def parent_of(metadata: dict[str, Any]) -> str | None:
    parent = metadata.get(PARENT_SESSION)
    return parent if isinstance(parent, str) and parent else None


def child_depth(metadata: dict[str, Any], parent_depth: int | None) -> int:
    """The depth of a run started with `metadata` (0: not a child run)."""
    if parent_of(metadata) is None:
        return 0
    if parent_depth is not None:
        return parent_depth + 1
    claimed = metadata.get(DEPTH)
    return claimed if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed >= 1 else 1


def child_start(parent_session_id: str, parent_tool_use_id: str, parent_depth: int, input: str | list[Any],
                **fields: Any) -> dict[str, Any]:
    """The StartRun body a tool publishes to start a child run."""
    metadata = dict(fields.pop("metadata", {}) or {})
    metadata.update({PARENT_SESSION: parent_session_id, PARENT_TOOL_USE: parent_tool_use_id,
                     DEPTH: parent_depth + 1})
    return {"v": 1, "input": input, **fields, "metadata": metadata}
