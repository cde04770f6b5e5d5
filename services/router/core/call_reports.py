"""Every call's `tool.result`, and the `tools.progress` after it, emitted by the router.

A batch of several calls is reported call by call as the calls finish (`ToolCallFinished`,
in finishing order, while the others still run): the call's events go out with a
transition that changes nothing else than `RunState.tools.reported`, so the client sees
the batch progress. The batch's result (`ToolsResult`) then emits the events of the calls
that were not reported (a single call's, one whose report was lost or came too late, a
recorded one of a redelivered batch), in the model's order, `completed` counting on after
the reported ones, first among the effects of the step's transition. A result the run
moved past emits them too: an executed call always has its event. Each event has its dedup
key (message_ids.tool_result_key), so the event log stores it once whoever emits it again.
"""

from __future__ import annotations

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ToolResultItem
from loopwire.shared.contract.session_state import SessionState

from .config import CoreConfig
from .effects import Effect, EmitEvent
from .inputs import BaseInput, CallFinishedInput, ToolsInput
from .transition import Decision, Transition

__all__ = ["on_call_finished", "unreported_events"]


def on_call_finished(tx: Transition, inp: CallFinishedInput, cfg: CoreConfig) -> Decision:
    """A call of the run's current tool batch finished: its events, once. A report of
    another step, of a run that ended, or of a call reported already changes nothing
    (the batch's result reports what is left)."""
    report = inp.report
    run = tx.st.run
    call = report.result.tool_use_id
    if run is None or run.run_id != report.run_id or run.pending_step != report.step_id:
        return Decision(state=None)
    batch = {c["id"] for c in run.tools.pending_calls}
    if call not in batch or call in run.tools.reported:
        return Decision(state=None)
    done = [t for t in run.tools.reported if t in batch]  # (an abandoned batch's are dropped)
    run.tools.reported = [*done, call]
    tx.effects.extend(_call_events(report.run_id, report.result, turn=report.turn, completed=len(done) + 1,
                                   total=report.total))
    return tx.finish()


def unreported_events(state: SessionState, inp: BaseInput) -> list[Effect]:
    """The events of a tool step's results that no `ToolCallFinished` reported in `state`'s
    run. None for a result whose tools service emitted them itself (an older one:
    `ToolsResult.results_reported`)."""
    if not isinstance(inp, ToolsInput) or inp.result.results_reported:
        return []
    r = inp.result
    run = state.run
    reported = set(run.tools.reported) if run is not None and run.run_id == r.run_id else set()
    completed = sum(item.tool_use_id in reported for item in r.results)
    out: list[Effect] = []
    for item in r.results:
        if item.tool_use_id not in reported:
            completed += 1
            out += _call_events(r.run_id, item, turn=r.turn, completed=completed, total=len(r.results))
    return out


def _call_events(run_id: str, item: ToolResultItem, *, turn: int, completed: int, total: int) -> list[Effect]:
    return [EmitEvent(kind="tool.result", key=message_ids.tool_result_key(item.tool_use_id), run_id=run_id,
                      fields=item.event_fields(turn)),
            EmitEvent(kind="tools.progress", key=message_ids.event_key("tools.progress", item.tool_use_id), run_id=run_id,
                      fields={"turn": turn, "total": total, "completed": completed})]
