"""What an agent is told at a step: the input it has not seen yet (pure functions).

The agent keeps its own history (its session), so each step gives it only what joined
loopwire's history since it last took input: the start's input, a follow-up, a steer, the
CommitmentGate's nudge. loopwire's history of an executor session holds those user
messages and the agent's final answers, nothing else, so the position in its content
blocks is a stable mark: the session record (agent_sessions.py) keeps how many blocks
the agent has been given, and the next step gives it the user blocks after that.

When the agent starts a session of its own while loopwire's history already holds a
conversation (a session whose agent files were lost, a StartRun `input` with assistant
turns), the earlier conversation comes first, rendered as text, so the agent is told
what was said.
"""

from __future__ import annotations

import json

from loopwire.shared.contract.messages import ContentBlock, Message

EARLIER = "The conversation so far, for context (you do not remember it):"
NOW = "The user's new message:"
RESUMED = ("The process running you was interrupted during your last turn. Continue the task from where "
           "you left off; do not repeat work already done.")
"""A step redelivered after a crash, resuming the agent's session: its input was given."""


def blocks(messages: list[Message]) -> list[tuple[str, ContentBlock]]:
    """(role, block) of every content block, in order."""
    out: list[tuple[str, ContentBlock]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            if isinstance(block, dict):
                out.append((str(message.get("role")), block))
    return out


def new_input(messages: list[Message], given: int | None,
              max_chars: int | None = None) -> tuple[list[ContentBlock], int]:
    """(the prompt's blocks, the block count the agent will have been given).

    `given`: the blocks the agent's session has taken (None: a new agent session).
    `max_chars`: a new session's transcript of the earlier conversation is trimmed to
    about this many characters (`trimmed`)."""
    flat = blocks(messages)
    if given is not None and 0 <= given <= len(flat):
        fresh = [_for_agent(b) for role, b in flat[given:] if role == "user"]
        return fresh, len(flat)
    last_answer = max((n for n, (role, _) in enumerate(flat) if role == "assistant"), default=-1)
    earlier, fresh_pairs = flat[:last_answer + 1], flat[last_answer + 1:]
    fresh = [_for_agent(b) for role, b in fresh_pairs if role == "user"]
    if not earlier:
        return fresh, len(flat)
    lines = [f"{'User' if role == 'user' else 'Assistant'}: {_text(b)}" for role, b in earlier if _text(b)]
    transcript = "\n\n".join(lines if max_chars is None else trimmed(lines, max_chars))
    return [{"type": "text", "text": f"{EARLIER}\n\n{transcript}\n\n{NOW}"}, *fresh], len(flat)


OMITTED = "[… {n} earlier message(s) left out to keep the context small …]"


def trimmed(lines: list[str], max_chars: int) -> list[str]:
    """The conversation's first line (the task) and as many of its latest as fit in
    `max_chars`, with a note of how many were left out between them; each line is cut
    to the room left."""
    if sum(len(line) + 2 for line in lines) <= max_chars or len(lines) < 2:
        return [line[:max_chars] for line in lines]
    first = lines[0][: max_chars // 4]
    room = max_chars - len(first)
    kept: list[str] = []
    for line in reversed(lines[1:]):
        if room <= 0:
            break
        kept.append(line[:room])
        room -= len(kept[-1]) + 2
    left_out = len(lines) - 1 - len(kept)
    return [first, *([OMITTED.format(n=left_out)] if left_out else []), *reversed(kept)]


def _for_agent(block: ContentBlock) -> ContentBlock:
    """Text and images as they are; anything else as its JSON in a text block."""
    if block.get("type") in ("text", "image"):
        return block
    return {"type": "text", "text": _text(block)}


def _text(block: ContentBlock) -> str:
    if block.get("type") == "text":
        return str(block.get("text") or "")
    if block.get("type") == "tool_result":
        content = block.get("content")
        return content if isinstance(content, str) else json.dumps(content)
    if block.get("type") in ("thinking", "redacted_thinking", "image"):
        return ""
    return json.dumps(block)
