"""The routing table: (mode, awaiting, stop_reason) -> what the run does next.

`mode` is `tools` when the run offers tools to the model and `chat` otherwise; `awaiting`
is what the run waited for when the result arrived (`RunState.awaiting`). A stop reason the table does not know ends
the run with what it has rather than guessing.
"""

from __future__ import annotations

from typing import Literal

Route = Literal["execute_tools", "run_again", "final"]

ROUTES: dict[tuple[str, str, str], Route] = {
    ("tools", "generate", "tool_use"): "execute_tools",
    ("tools", "generate", "end_turn"): "final",
    ("tools", "generate", "stop_sequence"): "final",
    # The answer was cut by max_tokens: end with what we have (a partial answer is
    # better than a loop that asks again for the same budget).
    ("tools", "generate", "max_tokens"): "final",
    # A server-side tool paused a long turn: send it back as is to continue.
    ("tools", "generate", "pause_turn"): "run_again",
    ("tools", "generate", "refusal"): "final",
    # Without tools offered a tool_use cannot be honoured: the text is the answer.
    ("chat", "generate", "tool_use"): "final",
    ("chat", "generate", "end_turn"): "final",
    ("chat", "generate", "stop_sequence"): "final",
    ("chat", "generate", "max_tokens"): "final",
    ("chat", "generate", "pause_turn"): "run_again",
    ("chat", "generate", "refusal"): "final",
}


def route(mode: str, awaiting: str, stop_reason: str | None) -> Route:
    return ROUTES.get((mode, awaiting, stop_reason or "end_turn"), "final")
