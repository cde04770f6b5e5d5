"""Tenant limits in the core (LOOPWIRE_TENANT_LIMITS; docs/security.md, "Tenant limits"):
runs wait for a slot of their tenant, starts are refused when its queue is full or its
day's allowance is spent, and a run that spends the allowance converges.

With limits configured every new run of a session first *waits*: the session is
`queued` and holds the run's start (`WaitingRun`), and the shell, after the commit, asks
the tenant's keys for a slot (`TenantSlot.acquire`; shared/stores/tenant_quotas.py).
Their answer comes back as an `AdmissionInput`: `granted` starts the run, `queued`
announces its place (`run.queued`), `refused` refuses the start (`quota_exceeded`). The
run's state is committed before its slot is asked for, so a slot record always names a
run its session committed; a slot is released by the transition that stops referring to
its run (`quota_effects`: every way a run ends goes through `end_run`, a waiting run
through `end_waiting`), and a crash between commit and release is repaired from the
stored outbox or by the sweep (services/router/shell/quota_sweep.py).

Usage is counted by running totals: every transition that adds usage reports its run's
totals (and the session's last ended run's, until they are counted) for the tenant's
day (`CountTenantUsage`), so a lost or repeated count adds each token once. The
allowance is judged on the tenant's usage as the shell read it for the input plus what
this transition added; runs of one tenant that spend at once may each finish the turn
they are in, and their converging answers go past the allowance by that much.
"""

from __future__ import annotations

from loopwire.shared.contract.event_fields import WarningFields
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import RunTotals, SessionState
from loopwire.shared.contract.tenant_limits import TenantLimit, utc_day

from . import budget
from .config import CoreConfig
from .effects import CountTenantUsage, Effect, TenantSlot
from .inputs import BaseInput
from .transition import Decision, Transition, reject

TENANT_QUOTA = "tenant_quota"
"""`run.ended.reason` of a run that converged because its tenant's allowance was spent."""
QUOTA_EXCEEDED = "quota_exceeded"


def limit_of(sid: str, cfg: CoreConfig) -> TenantLimit | None:
    """The limits session `sid` is held to; None when no tenant limits are configured."""
    return None if cfg.tenant_limits is None else cfg.tenant_limits.for_session(sid)


def today_now(tx: Transition) -> tuple[int, float] | None:
    """The tenant's usage today: as the shell read it for this input, plus this transition's."""
    base = tx.inp.tenant_today
    if base is None:
        return None
    return base[0] + tx.quota_added[0], base[1] + tx.quota_added[1]


def spent(limit: TenantLimit, today: tuple[int, float] | None) -> str | None:
    """The allowance `today`'s usage has spent (`tokens_per_day`, `usd_per_day`), or None."""
    if today is None:
        return None
    if limit.tokens_per_day is not None and today[0] >= limit.tokens_per_day:
        return "tokens_per_day"
    if limit.usd_per_day is not None and today[1] >= limit.usd_per_day:
        return "usd_per_day"
    return None


def refusal(tx: Transition, cfg: CoreConfig) -> tuple[str, str, str] | None:
    """(code, message, limit) when a new run of this session may not start: the day's
    allowance of its tenant is spent."""
    limit = limit_of(tx.st.session_id, cfg)
    allowance = spent(limit, today_now(tx)) if limit is not None else None
    if allowance is None:
        return None
    return QUOTA_EXCEEDED, spent_message(tx.st.session_id, allowance, cfg), allowance


def refused_start(tx: Transition, inp: BaseInput, cfg: CoreConfig) -> Decision | None:
    """The refusal of an input that would start a run while its tenant's allowance is spent."""
    refused = refusal(tx, cfg)
    return None if refused is None else reject(tx.st, inp, refused[0], message=refused[1], limit=refused[2])


def spent_message(sid: str, allowance: str, cfg: CoreConfig) -> str:
    assert cfg.tenant_limits is not None
    return (f"tenant {cfg.tenant_limits.tenant_of(sid)} has spent its {allowance} allowance for today (UTC); "
            "no run starts until the next day")


def note_usage(tx: Transition, run: RunState, *, tokens: int, cost: float | None, cfg: CoreConfig) -> None:
    """Usage the run's ledger just added, counted against the tenant's allowance
    (accounting.py counts it where tenant limits are configured)."""
    limit = limit_of(tx.st.session_id, cfg)
    if limit is None:
        return
    tx.quota_added = (tx.quota_added[0] + tokens, tx.quota_added[1] + (cost or 0.0))
    if limit.has_allowance and not run.budget.quota_spent and spent(limit, today_now(tx)) is not None:
        run.budget.quota_spent = True


def warn_unpriced(tx: Transition, run: RunState, model: str, *, cfg: CoreConfig) -> None:
    """A model without a price, the first time in the run: its tokens count against the
    tenant's allowance, its cost cannot."""
    limit = limit_of(tx.st.session_id, cfg)
    if limit is not None and limit.usd_per_day is not None:
        tx.emit("warning", f"warning:{run.run_id}:tenant_unpriced:{model}", run.run_id, WarningFields(code="tenant_unpriced",
                message=f"no price is known for model {model}: tenant {tenant(tx.st, cfg)}'s usd_per_day "
                        "allowance counts none of its cost, only its tokens (tokens_per_day)"))


def add_quota_effects(before: SessionState, decision: Decision, *, now_ns: int, cfg: CoreConfig) -> None:
    """The decision's tenant effects, among its effects and in its outbox: settled on the
    tenant's keys after the commit, and again from the outbox after a crash (decide.py
    asks where tenant limits are configured)."""
    if decision.state is None:
        return
    settle = quota_effects(before, decision.state, now_ns=now_ns, cfg=cfg)
    decision.effects.extend(settle)
    decision.state.outbox.extend(e.model_dump(mode="json") for e in settle)


def quota_effects(before: SessionState, after: SessionState, *, now_ns: int, cfg: CoreConfig) -> list[Effect]:
    """What a committed transition settles on its tenant's keys: the slots of the runs it
    stopped referring to, a slot for the run that waits unannounced (asked again on every
    transition until it is answered), and the usage it added."""
    release = sorted(_slot_runs(before) - _slot_runs(after))
    acquire = after.waiting.run_id if after.waiting is not None and after.waiting.position is None else None
    effects: list[Effect] = []
    if release or acquire:
        effects.append(TenantSlot(release=release, acquire=acquire))
    if after.usage != before.usage or after.cost_usd != before.cost_usd:
        totals = [(r.run_id, r.tokens, r.usd) for r in (totals_of(after.run) if after.run else None, after.ended_run)
                  if r is not None]
        if totals:
            effects.append(CountTenantUsage(day=utc_day(now_ns), totals=totals))
    return effects


def totals_of(run: RunState) -> RunTotals:
    return RunTotals(run_id=run.run_id, tokens=budget.tokens_used(run), usd=round(run.budget.cost_usd, 10))


def _slot_runs(st: SessionState) -> set[str]:
    """The runs of the session that hold (or wait for) a slot: the one in progress, the
    one waiting."""
    runs = set()
    if st.run is not None:
        runs.add(st.run.run_id)
    if st.waiting is not None:
        runs.add(st.waiting.run_id)
    return runs


def tenant(st: SessionState, cfg: CoreConfig) -> str:
    assert cfg.tenant_limits is not None
    return cfg.tenant_limits.tenant_of(st.session_id)
