"""A run that waits for a decision, rebuilt from the journal (the transcript) alone.

The router's state in Redis is a cache of the event log (rebuild.py). When it is lost
while a run waits on an approval checkpoint, the transcript still holds everything the
decision needs: the run's settings (`run.started.config`), the batch (the tool_use blocks
of the message that asked), the calls the checkpoint asks about (`approval.requested`),
the results the core gave reserved calls of that batch (their `tool.result`), and the
run's course so far (its messages, phase changes, plan, steering). `resumed_run` makes the
`RunState` of that run, paused on its checkpoint, so a `decision` sent after the loss
runs exactly the stored calls, as it would have on the lost state: approve, and the
batch goes to the tools service under the step id it would have had; deny, and the
model reads why.

What the transcript does not hold is recomputed or starts afresh:

- the plan gate's rejections of the batch (never run, whatever the decision): the gate
  is checked again on the run's settings and phase (strategy_loop.validate), without the
  tools' schemas, which the tools service checks again before any call;
- the run's cost: its messages' usage at `CoreConfig.prices` (input tokens at the input
  price: the events do not split out cache reads);
- step ids: generations go on from the session's last seq, above every generation id the
  run used (each generation left at least one stored event), so no new step is mistaken
  for an old one's record;
- the loop ladder's window and rung, the vacuous and nudge allowances: from zero;
- follow-ups queued while the run waited (they are in no event) are lost with the state.

An external agent's permission request (`source: "executor"`) is not resumed: the agent
waiting for it is gone with its step.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.events import (
    AnyEvent,
    ApprovalRequestedEvent,
    MessageEventBody,
    ToolResultEventBody,
)
from loopwire.shared.contract.messages import ContentBlock, is_block, message_text, tool_result_block
from loopwire.shared.contract.run_state import Checkpoint, RunConfig, RunState
from loopwire.shared.runtime.pricing import cost_at, price_for

from . import answers, strategy_loop
from .follow_ups import PROMPT_CHARS, truncate
from .profiles import PROFILES
from .stages import user_text

Prices = Mapping[str, Mapping[str, float]]


def resumed_run(asked: ApprovalRequestedEvent | None, events: list[AnyEvent], last_seq: int, *,
                prices: Prices | None = None) -> RunState | None:
    """The run whose `events` (from its `run.started`) end waiting on `asked` (its
    `approval.requested`), paused on that checkpoint; None when there is none, or when
    its events are not enough to go on with. `last_seq`: the session's last event."""
    if asked is None or not events or events[0].get("kind") != "run.started":
        return None
    started = events[0]
    try:
        config = RunConfig.model_validate(started.get("config") or {})
    except ValidationError:
        return None  # an older router's run: no settings to go on with
    run_id = asked["run_id"]
    if PROFILES[config.profile].executor is not None or run_id is None or started.get("run_id") != run_id:
        return None
    retracted = {e.get("turn") for e in events if e["kind"] == "retracted"}
    messages = [e for e in events if e["kind"] == "message"]
    kept = [m for m in messages if m.get("turn") not in retracted]
    run = RunState(run_id=run_id, config=config, started_ns=_ns(started.get("ts")), turn=len(messages),
                   gen_seq=last_seq, phase="approval")
    _ledger(run, messages, prices)
    _course(run, events, kept, waiting_turn=asked.get("turn"))
    run.answers = answers.from_events(config.profile, events, retracted)
    run.profile_phase = next((e["to"] for e in reversed(events) if e["kind"] == "phase.changed"),
                             PROFILES[config.profile].initial_phase)
    if not _checkpoint(run, asked, kept, events=events):
        return None
    return run


def plan_of(events: list[AnyEvent]) -> dict[str, Any] | None:
    """`SessionState.plan` as the latest `plan.updated` of the transcript left it."""
    last = next((e for e in reversed(events) if e["kind"] == "plan.updated"), None)
    if last is None:
        return None
    return {"run_id": last.get("run_id"), "steps": last.get("steps") or [], "phase": last.get("phase"),
            "verification": last.get("verification")}


def _ns(ts: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return 0


def _ledger(run: RunState, messages: list[MessageEventBody], prices: Prices | None) -> None:
    """Usage and cost of the run's generations."""
    for m in messages:
        raw = m.get("usage") or {}
        usage = Usage(input_tokens=int(raw.get("input_tokens", 0) or 0),
                      output_tokens=int(raw.get("output_tokens", 0) or 0))
        run.budget.usage = run.budget.usage + usage
        run.budget.last_context_tokens = usage.total_input() + usage.output_tokens
        model = m.get("model") or run.config.models[0]
        price = price_for(model, prices)
        if price is None:
            if model not in run.budget.unpriced:
                run.budget.unpriced.append(model)
        else:
            run.budget.cost_usd += cost_at(price, usage)


def _course(run: RunState, events: list[AnyEvent], kept: list[MessageEventBody], *, waiting_turn: Any) -> None:
    """What the run's events say of its course: its task and prompts, its outer and inner
    iterations, model switches, plan, tools called and what they gave."""
    prompts = [user_text((e.get("message") or {}).get("content") or "") for e in events
               if e["kind"] == "user.message" and e.get("source") in ("input", "follow_up", "steer")]
    prompts = [p for p in prompts if p]
    run.task = truncate(prompts[0] if prompts else "", PROMPT_CHARS)
    run.last_prompt = truncate(prompts[-1] if prompts else "", PROMPT_CHARS)
    texts = [message_text(m.get("message")) for m in kept]
    run.last_text = next((t for t in reversed(texts) if t.strip()), "")
    steering = [e for e in events if e["kind"] == "steering"]
    run.limits.outer = 1 + sum(1 for e in steering if e.get("source") == "follow_up_queue")
    switches = [e for e in steering if e.get("source") == "model_switch"]
    run.limits.model_offset = min(sum(1 for e in switches if e.get("to_model")), len(run.config.models) - 1)
    run.limits.temperature = next((e["temperature"] for e in reversed(switches) if e.get("temperature") is not None),
                                  None)
    run.limits.context_retries = sum(1 for e in steering if e.get("source") == "retry_reduced_context")
    run.budget.warned = [e["limit"] for e in events if e["kind"] == "budget.warning" and e.get("limit")]
    run.phase_changes = sum(1 for e in events if e["kind"] == "phase.changed")
    plan = next((e for e in reversed(events) if e["kind"] == "plan.updated"), None)
    if plan is not None:
        run.plan.steps = [dict(s) for s in plan.get("steps") or []]
        run.plan.verification = plan.get("verification")
    calls = [e for e in events if e["kind"] == "tool.call"]
    run.tools.calls_made = len(calls)
    run.tools.used = list(dict.fromkeys(e.get("name", "") for e in calls))
    last_boundary = max((n for n, e in enumerate(events) if e["kind"] == "steering"
                         and e.get("source") == "follow_up_queue"), default=-1)
    # A tool round is a turn whose results came back; the waiting batch's is not done.
    rounds = {e.get("turn") for e in events[last_boundary + 1:] if e["kind"] == "tool.result"}
    run.limits.inner = len(rounds - {waiting_turn})


def _checkpoint(run: RunState, asked: ApprovalRequestedEvent, kept: list[MessageEventBody], *,
                events: list[AnyEvent]) -> bool:
    """Pause `run` on the checkpoint `asked` opened, with its batch; False when the
    transcript does not show that batch."""
    if asked.get("tool_calls") is None:  # a proposal (turn_by_turn): its text is the answer
        run.approvals.checkpoint = Checkpoint(id=asked["checkpoint_id"], kind="proposal",
                                              text=str(asked.get("proposal") or ""))
        _executed(run, events, batch=set())
        return True
    asking = next((m for m in reversed(kept) if m.get("turn") == asked.get("turn")), None)
    content = ((asking or {}).get("message") or {}).get("content") or []
    calls = [b for b in content if is_block(b) and b.get("type") == "tool_use"]
    ask = [c["tool_use_id"] for c in asked["tool_calls"]]
    if not calls or not set(ask) <= {c["id"] for c in calls}:
        return False
    batch = {c["id"] for c in calls}
    rejected, _reserved = strategy_loop.validate(run, PROFILES[run.config.profile], calls, schemas=None)
    run.tools.answered = [_block(e) for e in events if e["kind"] == "tool.result" and e.get("tool_use_id") in batch]
    run.approvals.checkpoint = Checkpoint(id=asked["checkpoint_id"], kind="tool_calls", calls=calls, ask=ask,
                                          rejected={i: why for i, why in rejected.items() if i not in ask},
                                          text=run.last_text)
    run.tools.pending_calls = [{"id": c["id"], "name": c["name"]} for c in calls]
    _executed(run, events, batch)
    return True


def _block(event: ToolResultEventBody) -> ContentBlock:
    return tool_result_block(event["tool_use_id"], event.get("content", ""), is_error=bool(event.get("is_error")))


def _executed(run: RunState, events: list[AnyEvent], batch: set[str]) -> None:
    """`RunState.tools.executed` of the batches that finished (the waiting one's are counted
    when it does)."""
    by_tool: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["kind"] != "tool.result" or e.get("tool_use_id") in batch or not e.get("name"):
            continue
        entry = by_tool.setdefault(e["name"], {"tool": e["name"], "calls": 0, "ok": 0, "error": 0})
        entry["calls"] += 1
        entry["error" if e.get("is_error") else "ok"] += 1
    run.tools.executed = list(by_tool.values())
