"""The technical summary: what a run executed, the strategy loop's converge fallback for a
run that stops without a conclusion of the model's own.

Every run that ends `max_turns`, `budget_exhausted` or `loop_terminated` was stopped by
the router, not concluded by the model: unless the model concluded with the finish tool,
its `run.ended.conclusion` says why it stopped, the best answer it has, and what was done:
every tool called, how many calls, how many results were ok and how many errors, so a
reader (or the caller's code) can tell what state the world was left in without reading
the transcript. A run of the agentic profiles whose strategy config asks for a
conclusion (`RunConfig.conclusion`: its prompt carries the finish tool's guideline) and
whose model answered in text instead completes with the same summary of its answer,
classification `task_complete` / `explanation`: the model explained instead of calling
the finish tool. Its shape is the finish tool's conclusion (finish.py), with
`classification.primary` `incomplete` (or `task_complete`), `classification.terminal`
the run's status (or `explanation`), and one more field (loopwire's addition, docs/protocol.md):

    "executed": [{"tool": "add", "calls": 2, "ok": 2, "error": 0}, ...]   # first-use order

The bookkeeping is `RunState.tools.executed` (and the counts the progress reminder reads,
`tool_calls_made` and `tools_used`), updated with every finished batch (`record_batch`,
called where the batch's results join the history).
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract.run_state import RunState

from .finish import normalise_conclusion

STOPPED = {
    "budget_exhausted": "Out of budget.",
    "loop_terminated": "Stopped: the run was going round in a loop.",
    "max_turns": "Stopped at the run's turn limit (max_turns).",
}
"""The statuses of a run the router stopped, and how its summary opens."""
LIMITS = {
    "max_inner_iterations": "Stopped at the limit of tool rounds in one outer iteration (max_inner_iterations).",
    "max_outer_iterations": "Stopped at the limit of follow-ups taken in one run (max_outer_iterations).",
}
"""How the summary of a run that ended `max_turns` opens, by the limit that ended it."""
EXPLANATION = "explanation"
"""The terminal of a run that concluded with its answer in text, not the finish tool."""


def record_batch(run: RunState, results: list[dict[str, Any]], names: dict[str, str]) -> None:
    """Count a finished batch into the run's record: its calls and the tools used (what
    progress_injection.py's reminder reads) and each result under its tool, ok or error
    (this summary's `executed`)."""
    run.tools.calls_made += len(results)
    by_tool = {e["tool"]: e for e in run.tools.executed}
    for block in results:
        name = names.get(block.get("tool_use_id", ""), "")
        if not name:
            continue
        if name not in run.tools.used:
            run.tools.used.append(name)
        entry = by_tool.get(name)
        if entry is None:
            entry = by_tool[name] = {"tool": name, "calls": 0, "ok": 0, "error": 0}
            run.tools.executed.append(entry)
        entry["calls"] += 1
        entry["error" if block.get("is_error") else "ok"] += 1


def describe(run: RunState) -> str:
    """One sentence: the calls made, per tool, with their outcomes ("" when none)."""
    if not run.tools.executed:
        return ""
    total = sum(e["calls"] for e in run.tools.executed)
    parts = []
    for e in run.tools.executed:
        outcome = ", ".join(f"{e[k]} {k}" for k in ("ok", "error") if e[k])
        parts.append(f"{e['tool']} x{e['calls']} ({outcome})")
    return f"Executed {total} tool call(s) over {run.turn} turn(s): {'; '.join(parts)}."


def stopped_conclusion(run: RunState, status: str, text: str, reason: str | None = None) -> dict[str, Any] | None:
    """The conclusion of a run that ends with `status` and no conclusion of the model's
    own: the technical summary when the router stopped it, or when its strategy asked for
    a conclusion and it completed in text; else None. The summary opens with why the run
    stopped (nothing, for an explanation), then the best answer it has, then what was
    executed."""
    if status in STOPPED:
        opener, terminal, complete = LIMITS.get(reason or "", STOPPED[status]), status, False
    elif status == "completed" and run.config.conclusion:
        opener, terminal, complete = "", EXPLANATION, True
    else:
        return None
    answer = text.strip() or run.last_text.strip()
    summary = " ".join(p for p in (opener, answer, describe(run)) if p)
    conclusion = normalise_conclusion({"summary": summary}, terminal=terminal, complete=complete)
    conclusion["executed"] = [dict(e) for e in run.tools.executed]
    return conclusion
