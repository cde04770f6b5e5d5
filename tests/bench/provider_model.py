"""The model of the provider-bound pass, as the fake Messages API's responder
(`python -m loopwire.testing.fake_anthropic --responder tests.bench.provider_model:respond`):
the bench brain of the scripted model over HTTP. A session's first input `bench:N` asks for
N tool-turns: the model calls `wait` until the conversation holds N tool results, then
answers. Its pace is the fake's latency model (`/_fake/latency`), so the fake stays cheap:
a few writes per generation whatever it takes."""

from __future__ import annotations

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
