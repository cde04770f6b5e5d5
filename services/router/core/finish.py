"""A run's conclusion: the reserved finish tool, `finish_agentic_task`, the model's explicit
way to end a run; and the technical summary of a run the router stopped.

Offered in the `agentic` and `agentic_planned` profiles whenever the run offers tools
(AssembleContext.extra_tools; `tools: []` offers nothing, not even this). Its input:

    {"summary": str, "confidence": number?, "findings": [...], "outputs": [...]}

The core intercepts a call to it before the plan gate and before execution (`FinishStage`,
the first stage of those profiles): no tool service ever sees it. The run ends with status
`completed`, `final_text` = the summary, and `run.ended.conclusion` = the normalised input
(`conclusion`). Other calls in the same assistant message are not executed (each gets a
"not executed" result, so the history stays valid).

When a budget runs out in a run that offers the finish tool, the converging generation
offers ONLY this tool, with a note asking for an out-of-budget summary; the run ends
`budget_exhausted` with a conclusion whether the model called it or answered in text
(`out_of_budget_conclusion`).

The normalised conclusion (documented in docs/profiles.md):

    {"summary": str,
     "confidence": float | None,                       # clamped to [0, 1]
     "classification": {"primary": "task_complete" | "incomplete",
                        "terminal": "finish" | "budget_exhausted" | "explanation"},
     "findings": [{"action": "raise", "class": str, "summary": str,
                   "severity": str | None, "key": str | None, "details": dict}
                  | {"key": str | None, "status": "clear", "reason": str}],
     "outputs":  [{"kind": "output_proposal", "type": str, "dedupe_key": str | None,
                   "payload": any}]}

A finding given as a bare string is raised with that summary; `action`/`op`/`status`
values meaning resolved (`clear`, `resolve(d)`, `close(d)`, `fixed`) clear it, any other
value raises it. A cleared finding says which finding it clears and why, nothing else:
`{"key", "status": "clear", "reason"}` (`reason` from `reason`, else the summary's
fields), so a consumer matches it to the raised one by `key`. An output given as a bare string is a `text` proposal whose payload
is the string.

The technical summary (`stopped_conclusion`): what a run executed, the strategy loop's
converge fallback for a run that stops without a conclusion of the model's own.

Every run that ends `max_turns`, `budget_exhausted` or `loop_terminated` was stopped by
the router, not concluded by the model: unless the model concluded with the finish tool,
its `run.ended.conclusion` says why it stopped, the best answer it has, and what was done:
every tool called, how many calls, how many results were ok and how many errors, so a
reader (or the caller's code) can tell what state the world was left in without reading
the transcript. A run of the agentic profiles whose strategy config asks for a
conclusion (`RunConfig.conclusion`: its prompt carries the finish tool's guideline) and
whose model answered in text instead completes with the same summary of its answer,
classification `task_complete` / `explanation`: the model explained instead of calling
the finish tool. Its shape is the finish tool's conclusion (above), with
`classification.primary` `incomplete` (or `task_complete`), `classification.terminal`
the run's status (or `explanation`), and one more field (loopwire's addition, docs/protocol.md):

    "executed": [{"tool": "add", "calls": 2, "ok": 2, "error": 0}, ...]   # first-use order

The bookkeeping is `RunState.tools.executed` (and the counts the progress reminder reads,
`tool_calls_made` and `tools_used`), updated with every finished batch
(tool_batches.record_batch, called where the batch's results join the history).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopwire.shared.contract import protocol
from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.run_state import RunState

from .next_step import NextStep, NextStepFinalOutput
from .stages import Turn

FINISH_TOOL = protocol.FINISH_TOOL

FINISH_SPEC = ToolSpec(
    name=FINISH_TOOL,
    description=("End the task. Call this exactly once, when the task is complete (or cannot be completed), "
                 "with a summary of the outcome, the findings you raise or clear, and the outputs you propose."),
    input_schema={
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "The outcome, for the user."},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "findings": {"type": "array", "description": (
                "Findings to raise (action raise: class, summary, severity, key) or clear (action clear: the "
                "key of the finding it clears and the reason)."), "items": {
                "type": "object",
                "properties": {"action": {"type": "string", "enum": ["raise", "clear"]},
                               "class": {"type": "string"}, "summary": {"type": "string"},
                               "severity": {"type": "string"}, "key": {"type": "string"},
                               "reason": {"type": "string"}},
            }},
            "outputs": {"type": "array", "description": "Outputs to deliver (proposals).", "items": {
                "type": "object",
                "properties": {"type": {"type": "string"}, "dedupe_key": {"type": "string"}, "payload": {}},
            }},
        },
        "required": ["summary"],
    },
)

GUIDELINE = ("When the task is complete, call the finish_agentic_task tool with your summary and any findings "
             "and outputs.")
OUT_OF_BUDGET_NOTE = ("The run's budget is exhausted: this is your last reply. Call finish_agentic_task now with "
                      "a summary of what was done and what is left undone (out of budget), from what you already "
                      "know.")
FINISHED_RESULT = "The run is finished."

_CLEAR_WORDS = frozenset({"clear", "cleared", "resolve", "resolved", "close", "closed", "fixed", "ok"})


def finish_call(tool_calls: list[ContentBlock]) -> ContentBlock | None:
    """The first call to the finish tool in a turn, if any."""
    return next((c for c in tool_calls if c.get("name") == FINISH_TOOL), None)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def normalise_finding(raw: Any, n: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {"action": "raise", "class": "finding", "summary": _text(raw), "severity": None, "key": None,
                "details": {}}
    verb = str(raw.get("action") or raw.get("op") or raw.get("status") or "raise").lower()
    if verb in _CLEAR_WORDS:
        return {"key": _text(raw.get("key") or raw.get("id")) or None, "status": "clear",
                "reason": _text(raw.get("reason") or raw.get("summary") or raw.get("title") or raw.get("text") or "")}
    known = {"action", "op", "status", "class", "type", "summary", "title", "text", "severity", "key", "id"}
    return {
        "action": "raise",
        "class": _text(raw.get("class") or raw.get("type") or "finding"),
        "summary": _text(raw.get("summary") or raw.get("title") or raw.get("text") or ""),
        "severity": _text(raw["severity"]) if raw.get("severity") is not None else None,
        "key": _text(raw.get("key") or raw.get("id")) or None,
        "details": {k: v for k, v in raw.items() if k not in known},
    }


def normalise_output(raw: Any, n: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {"kind": "output_proposal", "type": "text", "dedupe_key": None, "payload": raw}
    payload = raw["payload"] if "payload" in raw else {k: v for k, v in raw.items()
                                                        if k not in ("type", "channel", "dedupe_key")}
    return {"kind": "output_proposal", "type": _text(raw.get("type") or raw.get("channel") or "text"),
            "dedupe_key": _text(raw.get("dedupe_key")) or None, "payload": payload}


def _confidence(value: Any) -> float | None:
    try:
        return max(0.0, min(1.0, float(value)))
    except (TypeError, ValueError):
        return None


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def normalise_conclusion(raw: Any, terminal: str = "finish", complete: bool = True) -> dict[str, Any]:
    """The finish tool's input as the run's `conclusion` (shape in the module docstring)."""
    body = raw if isinstance(raw, dict) else {"summary": _text(raw)}
    return {
        "summary": _text(body.get("summary")),
        "confidence": _confidence(body.get("confidence")),
        "classification": {"primary": "task_complete" if complete else "incomplete", "terminal": terminal},
        "findings": [normalise_finding(f, n) for n, f in enumerate(_items(body.get("findings")))],
        "outputs": [normalise_output(o, n) for n, o in enumerate(_items(body.get("outputs")))],
    }


def out_of_budget_conclusion(call: ContentBlock | None, text: str, best: str) -> dict[str, Any]:
    """The conclusion of a run that ran out of budget: the finish call's, if the last
    generation made one, else one built from its text (or the best answer so far)."""
    if call is not None:
        conclusion = normalise_conclusion(call.get("input") or {}, terminal="budget_exhausted", complete=False)
        if not conclusion["summary"]:
            conclusion["summary"] = text.strip() or best
        return conclusion
    summary = text.strip() or best
    return normalise_conclusion({"summary": f"Out of budget. {summary}".strip()}, terminal="budget_exhausted",
                                complete=False)


def own_conclusion(call: ContentBlock, text: str) -> tuple[dict[str, Any], str]:
    """A call of the application's own finish tool (RunConfig.finish_tool): its input as
    the run's conclusion, as given (the application's schema, not normalised), and the
    run's closing text: the input's `summary` when it has a string one, else `text`."""
    given = call.get("input")
    conclusion = dict(given) if isinstance(given, dict) else {"input": given}
    summary = conclusion.get("summary")
    return conclusion, summary if isinstance(summary, str) and summary.strip() else text


# The technical summary: the conclusion of a run the router stopped.

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


def stopped_conclusion(run: RunState, status: str, text: str, *, reason: str | None = None) -> dict[str, Any] | None:
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



@dataclass(frozen=True)
class FinishStage:
    """Intercepts `finish_agentic_task` before loop detection, the plan gate and execution."""

    name: str = "finish"

    def after_generation(self, turn: Turn) -> NextStep | None:
        call = finish_call(turn.tool_calls)
        config = turn.run.config
        if call is None or not config.finish:
            return None  # left out (`finish: false`): the plan gate answers the call as not offered
        if config.finish_tool is not None:
            conclusion, closing = own_conclusion(call, turn.text)
            return NextStepFinalOutput(status="completed", text=closing or None, conclusion=conclusion,
                                       closing=closing or None)
        conclusion = normalise_conclusion(call.get("input") or {})
        return NextStepFinalOutput(status="completed", text=conclusion["summary"] or turn.text,
                                   conclusion=conclusion, closing=conclusion["summary"])
