"""ProgressInjector: after tool results, remind the model of the task and the progress.

In long tool loops the original request scrolls far up the context and models drift. With
the profile setting `progress_injection: system_reminder`, the generation after each tool
batch gets a short ephemeral note (AssembleContext.ephemeral_notes, rendered by the memory
service as a `<system-reminder>` on the system prompt of that one request): the first user
request (truncated) and what has been done so far. It is never stored in the history, so
it costs no context in later turns and the history stays what the user and model said.
`none` turns it off. What has been done is the run's record of its batches
(technical_summary.record_batch).
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract.run_state import RunState

TASK_CHARS = 300


def truncate(text: str, limit: int = TASK_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def progress_note(run: RunState, results: list[dict[str, Any]], names: dict[str, str]) -> str:
    """The reminder for the generation after a tool batch."""
    last = ", ".join(f"{names.get(b.get('tool_use_id', ''), '?')} ({'error' if b.get('is_error') else 'ok'})"
                     for b in results)
    used = ", ".join(run.tools.used[:12]) or "none"
    return (f"Task: {truncate(run.task) or '(see the first user message)'}\n"
            f"Progress: {run.tools.calls_made} tool call(s) over {run.turn} turn(s); tools used: {used}; "
            f"latest results: {last or 'none'}.\n"
            "Continue with the task. When it is done, reply with the final answer.")


def progress_notes(run: RunState, results: list[dict[str, Any]], names: dict[str, str], *, mode: str) -> list[str]:
    """The notes for the profile's `progress_injection` mode (`system_reminder` or `none`)."""
    if mode != "system_reminder":
        return []
    return [progress_note(run, results, names)]
