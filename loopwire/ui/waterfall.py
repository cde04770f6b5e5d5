"""The waterfall of a session's runs, built from its events (`GET /api/sessions/{sid}/waterfall`):
for each run, its generations and tool calls as spans on a time axis (milliseconds from
the run's `run.started`), each turn's tokens and cost, and the points where the loop
changed course (loop detections, model fallbacks, compactions). waterfall.js draws it.

The events say when things ended, not all of when they began, so the spans are read this way:

| span | starts at | ends at |
|---|---|---|
| a generation (turn T) | its first `generating` event since it was asked, when it was seen (live only: not kept in the transcript), else the run's latest event after which the router asks for a generation (`GENERATION_STARTS`: the run's start, an input, a tool's result, a decision, a steer, a retraction, an error retried...) | its `message` |
| a tool call | its `tool.call`, or the `approval.decided` that let it run when one came between | its `tool.result` (none yet: open) |

A generation held back by the model limits (`model.throttled`, kept in the transcript) has
its wait at the head of its bar: `wait_ms` from its first `model.throttled` to its
`generating` (live only; from the transcript alone the wait is known to have happened,
`throttled`, but not how long it took).

Events that report on a generation are not its start: the llm service's `model.fallback`
comes during it (the turn's bar covers the attempts of the model that failed, the mark
says where it switched), and a `warning` the router emits with the result shares the
message's time.

A turn's cost is its usage at its model's price (shared/runtime/pricing.py, with the
operator's LOOPWIRE_PRICES), `None` when the model has no known price; the run's own
`run.ended.cost_usd` is the figure that counts against its budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.protocol import EPHEMERAL_KINDS
from loopwire.shared.runtime.pricing import cost_usd

MARK_KINDS = {"loop.detected": "loop", "model.fallback": "fallback", "compaction": "compaction"}
GENERATION_STARTS = frozenset({"run.started", "phase.changed", "user.message", "tool.result", "approval.decided",
                               "retracted", "steering", "error", "loop.detected", "plan.updated"})
"""Kinds after which the router asks for the next generation (`request_generation`, services/router/core/step_requests.py, and its callers)."""


def ts_ms(ts: str) -> float:
    """An event's RFC 3339 `ts` as milliseconds since the epoch."""
    return datetime.fromisoformat(ts).timestamp() * 1000.0


def mark_label(event: Mapping[str, Any]) -> str:
    kind = event.get("kind")
    if kind == "loop.detected":
        return f"loop {event.get('detection')} → {event.get('escalation')}"
    if kind == "model.fallback":
        return f"fallback {event.get('from_model')} → {event.get('to_model')} ({event.get('reason')})"
    return f"compaction {event.get('tokens_before')} → {event.get('tokens_after')} tokens"


class RunWaterfall:
    """One run's spans, fed its events in seq order."""

    def __init__(self, started: Mapping[str, Any], prices: Mapping[str, Mapping[str, float]] | None) -> None:
        self.run_id = str(started["run_id"])
        self.origin = ts_ms(started["ts"])
        self.prices = prices
        self.status: str | None = None
        self.end_ms: float | None = None
        self.turns: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.open_tools: dict[str, dict[str, Any]] = {}
        self.last_ms = 0.0
        """When the run's latest event of GENERATION_STARTS came: a generation asked after it starts there."""
        self.latest_ms = 0.0
        self.generating: dict[int, float] = {}
        self.throttled: dict[int, float] = {}
        """Turn -> its first `model.throttled` since the generation was asked."""

    def at(self, event: Mapping[str, Any]) -> float:
        return round(ts_ms(event["ts"]) - self.origin, 3)

    def add(self, event: Mapping[str, Any]) -> None:
        kind, at = event.get("kind"), self.at(event)
        if kind == "generating":  # the first of the turn's attempts since it was asked (a fallback asks again)
            turn = int(event.get("turn") or 0)
            if self.generating.get(turn, -1.0) < self.last_ms:
                self.generating[turn] = at
        elif kind == "model.throttled":
            turn = int(event.get("turn") or 0)
            if self.throttled.get(turn, -1.0) < self.last_ms:
                self.throttled[turn] = at
        elif kind == "message":
            self._generation(event, at)
        elif kind == "tool.call":
            span: dict[str, Any] = {"tool_use_id": event.get("tool_use_id"), "name": event.get("name"), "turn": event.get("turn"),
                    "start_ms": at, "end_ms": None, "duration_ms": None, "is_error": None, "recorded": None}
            self.tools.append(span)
            self.open_tools[str(event.get("tool_use_id"))] = span
        elif kind == "approval.decided":
            for span in self.open_tools.values():  # the calls waited for this decision, not ran
                span["start_ms"] = max(span["start_ms"], at)
        elif kind == "tool.result":
            answered = self.open_tools.pop(str(event.get("tool_use_id")), None)
            if answered is not None:
                answered.update(end_ms=at, duration_ms=round(at - answered["start_ms"], 3), is_error=bool(event.get("is_error")),
                            recorded=bool(event.get("recorded")))
        elif kind in MARK_KINDS:
            self.marks.append({"kind": MARK_KINDS[kind], "at_ms": at, "seq": event.get("seq"),
                               "label": mark_label(event)})
        elif kind == "run.ended":
            self.status, self.end_ms = event.get("status"), at
        if kind in GENERATION_STARTS:
            self.last_ms = max(self.last_ms, at)
        if kind not in EPHEMERAL_KINDS:
            self.latest_ms = max(self.latest_ms, at)

    def _generation(self, event: Mapping[str, Any], at: float) -> None:
        turn = int(event.get("turn") or 0)
        start = self.generating.pop(turn, None)
        start = self.last_ms if start is None or not self.last_ms <= start <= at else start
        throttled = self.throttled.pop(turn, None)
        throttled = throttled if throttled is not None and self.last_ms <= throttled <= at else None
        wait_ms = round(start - throttled, 3) if throttled is not None and start > throttled else None
        usage = event.get("usage") or {}
        # `input_tokens` counts all input; the prompt cache's read and written parts are
        # priced at their own rates.
        read, written = int(usage.get("cache_read_input_tokens") or 0), int(usage.get("cache_creation_input_tokens") or 0)
        total_input = int(usage.get("input_tokens") or 0)
        tokens = Usage(input_tokens=max(0, total_input - read - written), output_tokens=int(usage.get("output_tokens") or 0),
                       cache_read_input_tokens=read, cache_creation_input_tokens=written)
        model = event.get("model")
        self.turns.append({"turn": turn, "seq": event.get("seq"), "model": model, "start_ms": start, "end_ms": at,
                           "duration_ms": round(at - start, 3), "input_tokens": total_input,
                           "cache_read_input_tokens": read, "cache_creation_input_tokens": written,
                           "output_tokens": tokens.output_tokens,
                           "cost_usd": cost_usd(model, tokens, self.prices) if model else None,
                           "executor": event.get("source") == "executor",
                           "throttled": throttled is not None, "wait_ms": wait_ms})

    def to_dict(self) -> dict[str, Any]:
        ends = [t["end_ms"] for t in self.turns] + [t["end_ms"] or t["start_ms"] for t in self.tools] + [self.latest_ms]
        return {"run_id": self.run_id, "status": self.status,
                "duration_ms": self.end_ms if self.end_ms is not None else max(ends),
                "ended": self.end_ms is not None, "turns": self.turns, "tools": self.tools, "marks": self.marks}


def waterfall(events: Iterable[Mapping[str, Any]],
              prices: Mapping[str, Mapping[str, float]] | None = None) -> list[dict[str, Any]]:
    """Each run of the session, in order, as `RunWaterfall.to_dict()` (module docstring).
    `prices`: a price table (default: the built-in prices; the inspector passes the operator's)."""
    runs: dict[str, RunWaterfall] = {}
    for event in sorted(events, key=lambda e: int(e.get("seq") or 0)):
        run_id = event.get("run_id")
        if not isinstance(run_id, str) or not isinstance(event.get("ts"), str):
            continue
        if event.get("kind") == "run.started":
            runs[run_id] = RunWaterfall(event, prices)
        elif run_id in runs:
            runs[run_id].add(event)
    return [run.to_dict() for run in runs.values()]
