"""The technical summary: what a run executed, for a run that stops without an answer of
its own.

A run that ends `budget_exhausted` or `loop_terminated` was stopped by the router, not
concluded by the model. After tools ran, its `run.ended.conclusion` says what was done:
every tool called, how many calls, how many results were ok and how many errors, so a
reader (or the caller's code) can tell what state the world was left in without reading
the transcript. Its shape is the finish tool's conclusion (finish.py) with
`classification.primary` `incomplete`, `classification.terminal` the run's status, and
one more field (an addition to the contract):

    "executed": [{"tool": "add", "calls": 2, "ok": 2, "error": 0}, ...]   # first-use order

The bookkeeping is `RunState.executed`, updated with every finished batch
(`record_batch`, called where the batch's results join the history).
"""

from __future__ import annotations

from typing import Any

from .finish import normalise_conclusion
from .state import RunState

STOPPED = {
    "budget_exhausted": "Out of budget.",
    "loop_terminated": "Stopped: the run was going round in a loop.",
}
"""The statuses of a run the router stopped, and how its summary opens."""


def record_batch(run: RunState, results: list[dict[str, Any]], names: dict[str, str]) -> None:
    """Count each result of a finished batch under its tool, ok or error."""
    by_tool = {e["tool"]: e for e in run.executed}
    for block in results:
        name = names.get(block.get("tool_use_id", ""), "")
        if not name:
            continue
        entry = by_tool.get(name)
        if entry is None:
            entry = by_tool[name] = {"tool": name, "calls": 0, "ok": 0, "error": 0}
            run.executed.append(entry)
        entry["calls"] += 1
        entry["error" if block.get("is_error") else "ok"] += 1


def describe(run: RunState) -> str:
    """One sentence: the calls made, per tool, with their outcomes ("" when none)."""
    if not run.executed:
        return ""
    total = sum(e["calls"] for e in run.executed)
    parts = []
    for e in run.executed:
        outcome = ", ".join(f"{e[k]} {k}" for k in ("ok", "error") if e[k])
        parts.append(f"{e['tool']} x{e['calls']} ({outcome})")
    return f"Executed {total} tool call(s) over {run.turn} turn(s): {'; '.join(parts)}."


def stopped_conclusion(run: RunState, status: str, text: str, finish_offered: bool) -> dict[str, Any] | None:
    """The conclusion of a run that ends with `status`, when the router stopped it and
    either tools ran or the run offered the finish tool (its conclusion is then expected);
    else None. The summary opens with why the run stopped, then the best answer it has,
    then what was executed."""
    if status not in STOPPED or not (run.executed or (finish_offered and status == "budget_exhausted")):
        return None
    answer = text.strip() or run.last_text.strip()
    summary = " ".join(p for p in (STOPPED[status], answer, describe(run)) if p)
    conclusion = normalise_conclusion({"summary": summary}, terminal=status, complete=False)
    conclusion["executed"] = [dict(e) for e in run.executed]
    return conclusion
