"""A run that waits for a slot of its tenant (tenant_quotas.py): the tenant's answer for
it, and what a client sends meanwhile.

The shell asks the tenant's keys for a slot after the commit that parks the run
(run_lifecycle.begin_run) and hands their answer in as an `AdmissionInput`, for the
waiting session itself or, when a slot frees, for the head of the tenant's queue. Asked
twice (the router that freed the slot, and the sweep after a crash), an answer is
applied once: a run announced or started already is left alone.
"""

from __future__ import annotations

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.event_fields import ErrorFields, RunQueuedFields
from loopwire.shared.contract.messages import ContentBlock

from .config import CoreConfig
from .effects import TenantSlot
from .inputs import AdmissionInput
from .run_lifecycle import end_waiting, start_run
from .tenant_quotas import QUOTA_EXCEEDED, TENANT_QUOTA, limit_of, spent, spent_message, tenant, today_now
from .transition import Decision, Transition


def admit(tx: Transition, inp: AdmissionInput, cfg: CoreConfig) -> Decision:
    st = tx.st
    w = st.waiting
    if w is None or w.run_id != inp.run_id:
        if inp.verdict == "refused" or (st.run is not None and st.run.run_id == inp.run_id):
            return Decision(state=None)  # answered before: the run it started runs
        # A slot or a place given to a run that waits no more (aborted meanwhile): given back.
        return Decision(state=None, effects=[TenantSlot(release=[inp.run_id])])
    if inp.verdict == "queued":
        if w.position is not None:
            return Decision(state=None)  # announced already
        st.waiting = w.model_copy(update={"position": inp.position})
        tx.emit("run.queued", message_ids.event_key("run.queued", w.run_id), w.run_id, RunQueuedFields(position=inp.position))
        return tx.finish()
    limit = limit_of(st.session_id, cfg)
    if inp.verdict == "refused":
        tx.emit("error", message_ids.event_key("error", w.run_id, QUOTA_EXCEEDED), None, ErrorFields(code=QUOTA_EXCEEDED, limit="max_queued",
                message=f"tenant {tenant(st, cfg)} has {limit.max_queued if limit else 0} start(s) waiting for "
                        "a slot already (max_queued): this start is refused and no run starts"))
        st.waiting = None
        st.status = "idle"
        st.queued.clear()
        st.steering.clear()
        return tx.finish()
    allowance = spent(limit, today_now(tx)) if limit is not None else None
    if allowance is not None:  # the day's allowance was spent while it waited
        message = spent_message(st.session_id, allowance, cfg)
        tx.emit("error", message_ids.event_key("error", w.run_id, QUOTA_EXCEEDED), w.run_id, ErrorFields(code=QUOTA_EXCEEDED, limit=allowance,
                message=message))
        end_waiting(tx, "budget_exhausted", reason=TENANT_QUOTA, text=message)
        return tx.finish()
    st.waiting = None
    start_run(tx, w.config, w.messages, run_id=w.run_id, cfg=cfg, plan=w.plan, workspace=w.workspace,
              sources=w.sources, tools_known=w.tools_known, ignored_fields=w.ignored_fields,
              unknown_tools=w.unknown_tools)
    return tx.finish()


def steer_waiting(tx: Transition, content: list[ContentBlock]) -> Decision:
    """A steer while the run waits joins what the run starts with."""
    w = tx.st.waiting
    assert w is not None
    tx.st.waiting = w.model_copy(update={"messages": [*w.messages, {"role": "user", "content": content}],
                                         "sources": [*w.sources, "steer"]})
    return tx.finish()


def dequeue(tx: Transition, reason: str) -> Decision:
    """`abort` of a waiting run: it ends `aborted` before it started, and leaves its queue."""
    end_waiting(tx, "aborted", reason=reason)
    return tx.finish()
