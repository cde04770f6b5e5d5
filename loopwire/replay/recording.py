"""What a recorded session is made of, read from its transcript: for each run, the input
that started it and the inputs that came during it (follow-ups, steers, decisions, an
abort), each with the point at which it was applied; and what each run did (status, final
text, tool calls, turns, tokens, cost). A replay (driver.py) sends the same inputs at the
same points, and compares the two sessions run by run (comparison.py).

The points, from the events the router wrote when it applied each input:

| input | recorded as | sent in the replay |
|---|---|---|
| the run's start (`start`, or a `message` on an idle session) | `run.started.config` and the run's opening `user.message`s | as a `start` with those settings, once the previous run ended |
| a follow-up taken at the outer boundary after turn T | `user.message` `source: follow_up`, `turn: T` | while the run is in turn T (T-1 turns done) |
| a steer applied after T turns | `user.message` `source: steer`, `turn: T` | once T turns are done |
| a decision on the n-th checkpoint | `approval.decided` (loopwire's addition, docs/protocol.md) | to the run's n-th `approval.requested` |
| an abort after T turns | `run.ended` `status: aborted`, `turns: T`, `reason` | once T turns are done |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.events import AnyEvent, RunEndedEvent, UserMessageEvent
from loopwire.shared.contract.messages import Content, ContentBlock, Message

OPENING_SOURCES = ("input", "follow_up", "steer")
SETUP_KINDS = frozenset({"run.started", "phase.changed", "user.message", "warning", "plan.updated",
                         "budget.warning", "generating", "run.queued"})
"""Events a run emits before its first step: a user message among them opens the run."""


@dataclass
class InRunInput:
    verb: str
    """`message`, `steer` or `abort`."""
    body: dict[str, Any]
    after_turns: int
    """Sent once the replay's run has completed this many turns."""


@dataclass
class RunRecord:
    """One run of a session: what started it, what came during it, what it did."""

    run_id: str
    started_seq: int
    config: dict[str, Any] | None = None
    profile: str = "agentic"
    opening: list[Message] = field(default_factory=list)
    """The messages that opened the run (role and content), in order."""
    inputs: list[InRunInput] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """`{"decision", "note"}` of each checkpoint the run opened, in order."""
    ended: RunEndedEvent | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """`{"name", "input"}` of each tool call, in order."""
    models: list[str] = field(default_factory=list)
    """The models that made the run's turns, in first-use order."""
    setting_up: bool = field(default=True, repr=False)
    """No step has begun yet: a user message now opens the run."""

    def start_body(self, model: str | None = None, system: str | None = None) -> dict[str, Any]:
        """The StartRun that starts this run again (optionally on `model`, with `system`)."""
        c = self.config or {}
        body: dict[str, Any] = {"profile": c.get("profile") or self.profile, "input": self._input()}
        models = list(c.get("models") or [])
        spec = {"primary": models[0] if models else None, "fallbacks": models[1:],
                "max_tokens": c.get("max_tokens"), "temperature": c.get("temperature"),
                "memory": c.get("memory_model")}
        if model is not None:
            spec["primary"], spec["fallbacks"] = model, []
        body["model"] = {k: v for k, v in spec.items() if v not in (None, [])}
        for name in ("tools", "tool_permissions", "metadata"):
            if c.get(name) is not None:
                body[name] = c[name]
        body["system"] = system if system is not None else c.get("system")
        limits = {k: c[k] for k in ("max_turns", "max_total_tokens", "max_cost_usd", "context_window",
                                    "compaction_at_pct") if c.get(k) is not None}
        if limits:
            body["limits"] = limits
        strategy = {k: c[k] for k in ("actor", "expectation") if c.get(k) is not None}
        if strategy:
            body["strategy"] = strategy
        if c.get("executor_agent"):
            body["executor"] = {"agent": c["executor_agent"]}
        if c.get("user_id"):
            body["user_id"] = c["user_id"]
        return {k: v for k, v in body.items() if v is not None}

    def _input(self) -> str | list[Message]:
        messages = [m for m in self.opening if m.get("content")]
        if len(messages) == 1 and messages[0]["role"] == "user":
            blocks = _blocks(messages[0]["content"])
            if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
                return "".join(b.get("text", "") for b in blocks)
        merged: list[Message] = []
        for m in messages:  # StartRun wants alternating roles, from a user message to one
            if merged and merged[-1]["role"] == m["role"]:
                merged[-1] = {"role": m["role"], "content": _blocks(merged[-1]["content"]) + _blocks(m["content"])}
            else:
                merged.append(Message(role=m["role"], content=m["content"]))
        return merged or "(no input was recorded)"


def _blocks(content: Content | None) -> list[ContentBlock]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def said(message: Message) -> list[ContentBlock]:
    """What a user message says besides tool results (a steer rides on the cancelled calls')."""
    return [b for b in _blocks(message.get("content"))
            if not (isinstance(b, dict) and b.get("type") == "tool_result")]


def recorded_runs(events: list[AnyEvent]) -> list[RunRecord]:
    """The session's runs, in order, from its transcript (events in seq order; a fork's
    own events: the history it was forked with is not its input)."""
    runs: dict[str, RunRecord] = {}
    for event in sorted(events, key=lambda e: e.get("seq", 0)):
        run_id, kind = event.get("run_id"), event["kind"]
        if event["kind"] == "run.started" and isinstance(run_id, str):
            runs[run_id] = RunRecord(run_id=run_id, started_seq=int(event["seq"]), config=event.get("config"),
                                     profile=event.get("profile") or "agentic")
            continue
        run = runs.get(run_id) if isinstance(run_id, str) else None
        if run is None:
            continue
        if kind not in SETUP_KINDS:
            run.setting_up = False
        if event["kind"] == "user.message":
            _user_message(run, event)
        elif event["kind"] == "approval.decided":
            run.decisions.append({"decision": event.get("decision"), "note": event.get("note")})
        elif event["kind"] == "tool.call":
            run.tool_calls.append({"name": event.get("name"), "input": event.get("input")})
        elif event["kind"] == "message":
            model = event.get("model")
            if model and model not in run.models:
                run.models.append(model)
        elif event["kind"] == "run.ended":
            run.ended = event
            if event.get("status") == "aborted":
                run.inputs.append(InRunInput("abort", {"reason": event.get("reason") or "aborted"},
                                             int(event.get("turns") or 0)))
    return list(runs.values())


def _user_message(run: RunRecord, event: UserMessageEvent) -> None:
    message = event.get("message") or {}
    source, turn = event.get("source"), int(event.get("turn") or 0)
    if run.setting_up and source in OPENING_SOURCES:
        run.opening.append({"role": message.get("role", "user"), "content": message.get("content")})
        return
    content = said(message)
    if not content:
        return
    if source == "follow_up":
        run.inputs.append(InRunInput("message", {"content": content}, max(0, turn - 1)))
    elif source == "steer":
        run.inputs.append(InRunInput("steer", {"content": content}, turn))


def run_summary(run: RunRecord) -> dict[str, Any]:
    """What a run did, as the comparison shows it."""
    ended = run.ended
    if ended is None:
        return {"run_id": run.run_id, "status": "unfinished", "final_text": "", "turns": None,
                "input_tokens": None, "output_tokens": None, "cost_usd": None, "tool_calls": list(run.tool_calls),
                "models": list(run.models)}
    usage = ended.get("usage") or {}
    return {"run_id": run.run_id, "status": ended.get("status", "unfinished"),
            "final_text": ended.get("final_text") or "", "turns": ended.get("turns"),
            "input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
            "cost_usd": ended.get("cost_usd"), "tool_calls": list(run.tool_calls), "models": list(run.models)}
