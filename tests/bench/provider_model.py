"""The model of the provider-bound pass, as the fake Messages API's responder
(`python -m loopwire.testing.fake_anthropic --responder tests.bench.provider_model:respond`):
the bench brain of the scripted model over HTTP. A session's first input `bench:N` asks for
N tool-turns: the model calls `wait` until the conversation holds N tool results, then
answers. Its pace is the fake's latency model (`/_fake/latency`), so the fake stays cheap:
a few writes per generation whatever it takes."""

from __future__ import annotations

import json
import re
from typing import Any


def _first_text(messages: list[dict[str, Any]]) -> str:
    content = messages[0].get("content") if messages else ""
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _results(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "user" and isinstance(m.get("content"), list)
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")


def respond(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    head = _first_text(messages)
    wanted = int(head.split("bench:", 1)[1].split()[0]) if "bench:" in head else 0
    done = _results(messages)
    if done < wanted:
        return {"tool_use": [{"name": "wait", "input": {"n": done}}], "usage": {"input_tokens": 400, "output_tokens": 20}}
    return {"text": f"Done after {done} tool-turns.", "usage": {"input_tokens": 400, "output_tokens": 12}}


def respond_cost(body: dict[str, Any]) -> dict[str, Any]:
    """The cost pass's model (cost_pass.py): `bench:N` tool-turns over its ten lookup tools in
    turn, then an answer; a request without tools (the memory service's summary) answered
    with a short summary."""
    if not body.get("tools"):
        return {"text": "Summary: the records looked up so far, their figures and notes."}
    messages = body.get("messages") or []
    head = _first_text(messages)
    wanted = int(head.split("bench:", 1)[1].split()[0]) if "bench:" in head else 0
    # Counted by the records' numbers, not the results: a compaction summarises old ones away.
    seen = [int(n) for n in re.findall(r"lookup_\d record (\d+):", json.dumps(messages))]
    done = max(seen) + 1 if seen else 0
    if done < wanted:
        return {"text": f"Looking up record {done}.", "tool_use": [{"name": f"lookup_{done % 10}", "input": {"n": done}}]}
    return {"text": f"Done after {done} lookups."}
