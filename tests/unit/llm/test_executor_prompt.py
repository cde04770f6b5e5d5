"""What an agent is told when ContextGuard starts a fresh agent session for it: the
conversation in a transcript trimmed to its budget (services/llm/executors/prompt.py)."""

from __future__ import annotations

import pytest

from loopwire.llm.executors.prompt import OMITTED, new_input, trimmed

pytestmark = pytest.mark.unit


def test_a_fresh_sessions_transcript_keeps_the_task_and_the_latest_within_its_budget() -> None:
    lines = ["User: the task"] + [f"Assistant: answer {n} " + "x" * 50 for n in range(40)]
    kept = trimmed(lines, 600)
    assert kept[0] == "User: the task" and kept[1].startswith("[…") and kept[-1] == lines[-1]
    assert sum(len(line) for line in kept) <= 700 and kept[1] == OMITTED.format(n=len(lines) - len(kept) + 1)
    assert trimmed(lines[:3], 10_000) == lines[:3], "what fits stays whole"
    messages = [{"role": "user", "content": "the task"}]
    for n in range(30):
        messages += [{"role": "assistant", "content": f"answer {n} " + "y" * 100},
                     {"role": "user", "content": f"question {n + 1}"}]
    prompt, total = new_input(messages, None, max_chars=1000)
    text = prompt[0]["text"]
    assert "the task" in text and "answer 29" in text and "answer 0 " not in text and "left out" in text
    assert prompt[-1] == {"type": "text", "text": "question 30"} and total == len(messages)
