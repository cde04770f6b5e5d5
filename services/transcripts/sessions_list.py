"""`<prefix>.api.sessions.list` (loopwire's addition, docs/protocol.md): the sessions, most
recently updated first, a page at a time.

The router's commit script (shared/stores/session_store.py) marks a session updated in a sorted
set by Redis's clock, in the same round trip as its state; a page reads the set from the
cursor and the pages' states in one pipelined call. The cursor is the last listed entry's
`<ms>:<sid>`, so a session updated while a client pages moves to the top instead of
shifting the pages under it. A status filter reads at most SCAN_CAP entries per request
and answers with what it found and a cursor to go on from.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.protocol import PROTOCOL_VERSION, SessionsListRequest, error_reply
from loopwire.shared.contract.session_state import (
    SessionState,
    is_deleted,
    reported_cost,
    reported_usage,
    run_position,
    stored_state,
)
from loopwire.shared.stores.session_store import SessionStore

SCAN_CAP = 2000
"""Index entries one request reads at most while filtering by status."""


def parse_cursor(cursor: str | None) -> tuple[int, str] | None | dict[str, Any]:
    """(ms, sid) of a cursor, None without one, or the error reply for a malformed one."""
    if cursor is None:
        return None
    ms, colon, sid = cursor.partition(":")
    if not colon or not ms.isdigit() or not sid:
        return error_reply("invalid_request", "cursor: not a cursor this query returned")
    return int(ms), sid


def rfc3339_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def summary(sid: str, st: SessionState, ms: int) -> dict[str, Any]:
    return {"session_id": sid, "status": st.status, "profile": st.profile,
            "turns": st.turns, "updated_at": rfc3339_ms(ms),
            # additions: what session.get says of the same state, for a list that shows them
            "usage": reported_usage(st), "cost_usd": reported_cost(st),
            **dict(zip(("phase", "activity"), run_position(st), strict=True))}


async def sessions_list(req: SessionsListRequest, sessions: SessionStore, tenant: str | None = None) -> dict[str, Any]:
    """One page of `tenant`'s sessions (its own index), or of the sessions without a
    tenant."""
    after = parse_cursor(req.cursor)
    if isinstance(after, dict):
        return after
    index = keys.sessions_index(f"{tenant}.x" if tenant else "x")
    listed: list[dict[str, Any]] = []
    scanned = 0
    exhausted = False
    while len(listed) < req.limit and scanned < SCAN_CAP:
        batch = await sessions.recently_updated(index, after, min(req.limit, SCAN_CAP - scanned))
        if not batch:
            exhausted = True
            break
        states = await sessions.load_many([sid for sid, _ in batch])
        for (sid, ms), state in zip(batch, states, strict=True):
            after = (ms, sid)
            scanned += 1
            if state is None or is_deleted(state):  # expired or deleted since: not a session any more
                continue
            st = stored_state(state)
            if req.status is not None and st.status != req.status:
                continue
            listed.append(summary(sid, st, ms))
            if len(listed) == req.limit:
                break
    cursor = None if exhausted or after is None else f"{after[0]}:{after[1]}"
    return {"v": PROTOCOL_VERSION, "sessions": listed, "cursor": cursor}
