"""Keeping the history valid for the Messages API: every tool_use block gets its result.

The API rejects a history in which an assistant's tool_use block has no tool_result in
the next user message. Whatever ends or abandons a batch before its results came back
answers each call of it here: a run that ends with calls pending or just asked for
(`close_dangling_tool_uses`), a steer that abandons calls in flight (follow_ups.py).
The core's own answers (reserved tools, the finish call that ended the run) are kept.
"""

from __future__ import annotations

from loopwire.shared.contract.messages import ContentBlock, tool_result_block, tool_uses
from loopwire.shared.contract.run_state import RunState

from .finish import FINISH_TOOL, FINISHED_RESULT
from .stages import not_executed
from .transition import Transition


def close_dangling_tool_uses(tx: Transition, run: RunState, status: str) -> None:
    """A run that ends after the model asked for tools leaves tool_use blocks without
    results; the Messages API rejects such a history, so each gets an error result."""
    if run.awaiting in ("tools", "approval") and run.tools.pending_calls:
        calls = run.tools.pending_calls
    else:
        calls = []
        if tx.append and tx.append[-1].get("role") == "assistant":
            calls = [{"id": b["id"], "name": b["name"]} for b in tool_uses(tx.append[-1])]
    if calls:
        tx.add_message({"role": "user", "content": batch_results(run, calls, f"not executed: the run ended ({status})")})
    run.tools.pending_calls = []
    run.tools.answered = []


def batch_results(run: RunState, calls: list[ContentBlock], why: str) -> list[ContentBlock]:
    """Results for a batch that will not run: the core's own answers where it has them
    (reserved tools; the finish call that ended the run), else an error result `why`."""
    answered = {b["tool_use_id"]: b for b in run.tools.answered}
    blocks = []
    for c in calls:
        if c["id"] in answered:
            blocks.append(answered[c["id"]])
        elif c["name"] == FINISH_TOOL:
            blocks.append(tool_result_block(c["id"], FINISHED_RESULT))
        else:
            blocks.extend(not_executed([c], why))
    return blocks
