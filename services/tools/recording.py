"""Tool calls answered from a recording: the tool steps of a fork made with recorded tools
(a replay, `loopwire replay`), which never reach a tool provider.

The recording is the source session's transcript: each `tool.result` with the `tool.call`
it answers. A call of the fork is matched by tool name and input (the input compared as
canonical JSON); the n-th call of the fork with that name and input gets the n-th result
recorded for them (the last one again once they run out), so a tool called twice with the
same input and two different answers is replayed in order. A call with no recorded match
gets an `is_error` result that says so: the model reads it, as any tool failure.

Who may ask for it: whoever may fork the session (the same tenant: the fork's source is
its own, services/router/shell/fork.py). It grants nothing the client could not read already,
the source's transcript, and runs nothing: the results come only from `tool.result`
events, which loopwire's services write for calls they made (or answered themselves),
never from anything a client sends, so a client cannot put results of its own into a
run this way. Denied calls stay denied: the router's permissions and approvals apply to
a replay as to any run; only the execution is answered from the recording.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall, ToolResultItem
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.stores.event_log import EventLogStore
from loopwire.shared.stores.transcript import read_transcript

NO_MATCH = "no recorded result for {name} with this input in session {source}: the replay ran no tool"


def call_key(name: str, arguments: Any) -> bytes:
    """A tool call as the recording matches it: its name and its input as canonical JSON."""
    return orjson.dumps([name, arguments], option=orjson.OPT_SORT_KEYS)


def recorded_results(events: Iterable[AnyEvent]) -> dict[bytes, list[dict[str, Any]]]:
    """The results of a transcript's tool calls by call key, in the order they were recorded."""
    calls: dict[str, bytes] = {}
    results: dict[bytes, list[dict[str, Any]]] = {}
    for event in events:
        kind, tid = event.get("kind"), event.get("tool_use_id")
        if kind == "tool.call" and isinstance(tid, str):
            calls[tid] = call_key(str(event.get("name")), event.get("input") or {})
        elif kind == "tool.result" and tid in calls:
            results.setdefault(calls.pop(tid), []).append(
                {"content": event.get("content", ""), "is_error": bool(event.get("is_error"))})
    return results


def position(events: Iterable[AnyEvent], tool_use_id: str, key: bytes) -> int:
    """How many calls with `key` the session made before `tool_use_id` (its own `tool.call`
    events, emitted before the call is executed)."""
    n = 0
    for event in events:
        if event["kind"] != "tool.call":
            continue
        if event.get("tool_use_id") == tool_use_id:
            return n
        if call_key(str(event.get("name")), event.get("input") or {}) == key:
            n += 1
    return n


class Recordings:
    """Answers a recorded fork's tool calls from its source's transcript."""

    def __init__(self, events: EventLogStore) -> None:
        self.events = events

    async def answer(self, env: ExecuteTools, call: ToolCall) -> ToolResultItem:
        source = env.recording
        assert source is not None, "only a step with a recording is answered from one"
        key = call_key(call.name, call.input)
        recorded = recorded_results(await read_transcript(source, self.events)).get(key)
        if not recorded:
            return ToolResultItem(tool_use_id=call.tool_use_id, name=call.name, is_error=True,
                                  content=NO_MATCH.format(name=call.name, source=source), recorded=True)
        n = position(await read_transcript(env.session_id, self.events), call.tool_use_id, key)
        hit = recorded[min(n, len(recorded) - 1)]
        return ToolResultItem(tool_use_id=call.tool_use_id, name=call.name, content=hit["content"],
                              is_error=hit["is_error"], recorded=True)
