"""Subagents: a tool may start a child run, through the same public contract.

A tool (in-process or a NATS provider) publishes a `start` on a session of its own
choosing, with the link to its parent in `metadata`:

    {"parent_session_id": "<the calling session>", "parent_tool_use_id": "<the call>",
     "subagent_depth": <the parent's depth + 1>}

and with the headers of the call that runs it, `Loopwire-Session-Id` and
`Loopwire-Tool-Use-Id`, forwarded on the publish (`child_start` builds that body,
`child_headers` those headers; an in-process tool gets them from
`loopwire.tools.registry.current_call().headers()`). The tool follows the child's `run.ended` on
`loopwire.out.<child sid>.run.ended` and returns what it needs as its result.

The depth comes from the router's own records, not from what the start claims:

- the parent is the metadata's `parent_session_id`, else the ingress message's
  `Loopwire-Session-Id` header (a tool that forwards its call's headers names its parent
  even when the body leaves the field out);
- when the parent session is known, the child's depth is the depth the router recorded
  for the parent's run + 1 (the shell reads the parent's state and passes it in); a
  parent it has no record of gives the claimed depth, at least 1;
- a session's depth never goes down: a later `start` (or follow-up) on a session whose
  last run was a child at depth d is at depth d or more, with or without the fields, so
  restarting a child session without them does not reset its depth.

A start deeper than `LOOPWIRE_MAX_SUBAGENT_DEPTH` (default 3) gets an `error` event
`subagent_depth_exceeded` and starts nothing. The depth is kept in the run's config
(`RunConfig.subagent_depth`) and shown in `run.started` (`parent_session_id`,
`parent_tool_use_id`, `subagent_depth`, additions) for a child run.

What this cannot see: a start published by a program that forwards neither the field
nor the headers is, to the router, a client's start at depth 0 (any client may start
one). The limit stops recursion through tools that start children the documented way.
"""

from __future__ import annotations

from typing import Any

PARENT_SESSION = "parent_session_id"
PARENT_TOOL_USE = "parent_tool_use_id"
DEPTH = "subagent_depth"


SESSION_HEADER = "Loopwire-Session-Id"
TOOL_USE_HEADER = "Loopwire-Tool-Use-Id"


def parent_of(metadata: dict[str, Any], headers: dict[str, str] | None = None) -> str | None:
    """The parent session of a start: the metadata's, else the forwarded call header's."""
    parent = metadata.get(PARENT_SESSION)
    if isinstance(parent, str) and parent:
        return parent
    header = (headers or {}).get(SESSION_HEADER)
    return header if isinstance(header, str) and header else None


def child_depth(metadata: dict[str, Any], parent: str | None, parent_depth: int | None,
                *, recorded_depth: int = 0) -> int:
    """The depth of a run started with `metadata` whose parent session is `parent`
    (`parent_of`), whose parent's recorded depth is `parent_depth` (None: no record),
    on a session whose last run was at `recorded_depth` (0: not a child run)."""
    if parent is None:
        return recorded_depth
    if parent_depth is not None:
        return max(parent_depth + 1, recorded_depth)
    claimed = metadata.get(DEPTH)
    claimed = claimed if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed >= 1 else 1
    return max(claimed, recorded_depth)


def child_headers(parent_session_id: str, parent_tool_use_id: str) -> dict[str, str]:
    """The headers a tool forwards on the child's `start` (those of the call it runs)."""
    return {SESSION_HEADER: parent_session_id, TOOL_USE_HEADER: parent_tool_use_id}


def child_start(parent_session_id: str, parent_tool_use_id: str, parent_depth: int, input: str | list[Any],
                **fields: Any) -> dict[str, Any]:
    """The StartRun body a tool publishes to start a child run."""
    metadata = dict(fields.pop("metadata", {}) or {})
    metadata.update({PARENT_SESSION: parent_session_id, PARENT_TOOL_USE: parent_tool_use_id,
                     DEPTH: parent_depth + 1})
    return {"v": 1, "input": input, **fields, "metadata": metadata}
