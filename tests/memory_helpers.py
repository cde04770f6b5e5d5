"""Builders and checks shared by the memory tests: conversations, and the Messages API's
structural rules a request must keep."""

from __future__ import annotations

import random
from typing import Any


def text(role: str, body: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": body}]}


def tool_turn(i: int, result: str = "ok", n_calls: int = 1) -> list[dict[str, Any]]:
    """An assistant message calling `n_calls` tools and the user message with their results."""
    ids = [f"toolu_{i}_{k}" for k in range(n_calls)]
    assistant = {"role": "assistant", "content": [{"type": "text", "text": f"calling tools for step {i}"}]
                 + [{"type": "tool_use", "id": tid, "name": "add", "input": {"a": i, "b": k}}
                    for k, tid in enumerate(ids)]}
    user = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": f"{result} {i}"}
                                        for tid in ids]}
    return [assistant, user]


def conversation(turns: int, words: int = 20) -> list[dict[str, Any]]:
    """user, assistant, user, ... ending with a user message."""
    history = [text("user", "My secret code is ALPHA-7. " + "filler " * words)]
    for i in range(turns):
        history.append(text("assistant", f"answer {i} " + "words " * words))
        history.append(text("user", f"question {i + 1} " + "more " * words))
    return history


def agentic(steps: int, seed: int = 0, result_size: int = 50) -> list[dict[str, Any]]:
    """A run of tool turns with some plain exchanges in between, ending with a user message."""
    rng = random.Random(seed)
    history = [text("user", "Please work through the task: " + "context " * 30)]
    for i in range(steps):
        if rng.random() < 0.25:
            history.append(text("assistant", f"progress note {i} " + "x " * rng.randint(5, 40)))
            history.append(text("user", f"steer {i}"))
        else:
            history.extend(tool_turn(i, "r" * rng.randint(1, result_size), n_calls=rng.randint(1, 3)))
    return history


def assert_valid_request(messages: list[dict[str, Any]]) -> None:
    """The rules the Messages API enforces on `messages`."""
    assert messages, "no messages"
    assert messages[0]["role"] == "user", "the first message must be a user message"
    for prev, nxt in zip(messages, messages[1:], strict=False):
        assert prev["role"] != nxt["role"], "roles must alternate"
    for i, message in enumerate(messages):
        blocks = message["content"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if message["role"] == "assistant":
            assert not results, "tool_result in an assistant message"
            uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if uses and i + 1 < len(messages):
                answered = [b["tool_use_id"] for b in messages[i + 1]["content"] if b.get("type") == "tool_result"]
                assert set(uses) <= set(answered), f"tool_use {uses} not answered in the next message"
            continue
        if results:
            assert i > 0, "tool_result in the first message"
            uses = {b["id"] for b in messages[i - 1]["content"] if b.get("type") == "tool_use"}
            for r in results:
                assert r["tool_use_id"] in uses, f"orphan tool_result {r['tool_use_id']}"
            kinds = [b.get("type") for b in blocks]
            first_other = next((k for k, t in enumerate(kinds) if t != "tool_result"), len(kinds))
            assert all(t != "tool_result" for t in kinds[first_other:]), "tool_result after other content"
