"""The reserved finish tool, `finish_agentic_task`: the model's explicit way to end a run.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopwire.shared.contract import protocol
from loopwire.shared.contract.envelopes import ToolSpec

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


def finish_call(tool_calls: list[dict[str, Any]]) -> dict[str, Any] | None:
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


def out_of_budget_conclusion(call: dict[str, Any] | None, text: str, best: str) -> dict[str, Any]:
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


@dataclass(frozen=True)
class FinishStage:
    """Intercepts `finish_agentic_task` before loop detection, the plan gate and execution."""

    name: str = "finish"

    def after_generation(self, turn: Turn) -> NextStep | None:
        call = finish_call(turn.tool_calls)
        if call is None:
            return None
        conclusion = normalise_conclusion(call.get("input") or {})
        return NextStepFinalOutput(status="completed", text=conclusion["summary"] or turn.text,
                                   conclusion=conclusion, closing=conclusion["summary"])
