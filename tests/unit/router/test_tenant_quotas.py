"""Tenant limits in the router's core (services/router/core/tenant_quotas.py, admission.py):
with LOOPWIRE_TENANT_LIMITS every new run waits for its tenant's answer (granted,
queued, refused), a queued run can be steered, followed up and aborted, a run that ends
in any way gives its slot back, usage is reported as running totals, a spent day refuses
starts and converges the runs it catches. The shell's side (the tenant's keys) is tested
against Redis and end to end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopwire.router.core.effects import CountTenantUsage, PublishWork, TenantSlot
from loopwire.router.core.transition import Decision
from loopwire.shared.contract.tenant_limits import TenantLimit, TenantLimits
from tests.router_driver import CFG, Driver, call

LIMITS = TenantLimits.parse({"acme": TenantLimit(max_running=1, max_queued=2, tokens_per_day=100),
                             "*": TenantLimit(usd_per_day=1.0)}, tenants=True)
QCFG = replace(CFG, tenant_limits=LIMITS)


def slots(d: Decision) -> list[TenantSlot]:
    return [e for e in d.effects if isinstance(e, TenantSlot)]


def usage(d: Decision) -> list[CountTenantUsage]:
    return [e for e in d.effects if isinstance(e, CountTenantUsage)]


def driver(sid: str = "acme.s1", cfg: Any = QCFG) -> Driver:
    return Driver(cfg, sid=sid)


def test_a_start_waits_for_its_tenant_and_starts_when_granted() -> None:
    d = driver()
    parked = d.start()
    assert d.state.status == "queued" and d.state.run is None and d.state.waiting is not None
    assert d.kinds(parked) == [] and not any(isinstance(e, PublishWork) for e in parked.effects)
    assert [(s.acquire, s.release) for s in slots(parked)] == [("run1", [])]
    assert {"type": "slot", "release": [], "acquire": "run1"} in d.state.outbox, "performed again after a crash"
    assert d.history == []

    started = d.admit("granted")
    assert d.state.status == "running" and d.run.run_id == "run1" and d.state.waiting is None
    assert d.kinds(started) == ["run.started", "phase.changed", "user.message"]
    assert d.of("user.message", started)[0]["source"] == "input"
    assert slots(started) == [], "the slot is held; nothing to settle"
    assert d.history == [{"role": "user", "content": [{"type": "text", "text": "please help"}]}]
    assert d.admit("granted", run_id="run1").state is None, "granted twice: applied once"


def test_a_queued_start_is_announced_once_and_starts_later() -> None:
    d = driver()
    d.start()
    queued = d.admit("queued", position=2)
    assert d.of("run.queued", queued) == [{"position": 2}] and d.state.waiting.position == 2  # type: ignore[union-attr]
    assert slots(queued) == [], "its place is kept: not asked for again"
    assert d.admit("queued", position=1).state is None
    d.message("and in French")  # a follow-up waits like one during a run
    assert d.state.queued and d.state.status == "queued"
    d.steer("use the staging database")
    assert d.admit("granted").state is not None
    assert [m["content"][0]["text"] for m in d.history] == ["please help", "use the staging database"]
    assert [f["source"] for f in d.of("user.message")] == ["input", "steer"]
    assert d.state.queued, "the follow-up is taken at the run's outer boundary"


def test_a_full_queue_refuses_the_start_and_no_run_starts() -> None:
    d = driver()
    d.start()
    refused = d.admit("refused")
    (error,) = d.of("error", refused)
    assert error["code"] == "quota_exceeded" and error["limit"] == "max_queued"
    assert d.state.status == "idle" and d.state.waiting is None and d.state.runs == 0
    assert "run.started" not in d.kinds() and "run.ended" not in d.kinds()
    assert [s.release for s in slots(refused)] == [["run1"]]


def test_abort_dequeues_a_queued_run_and_a_late_grant_is_given_back() -> None:
    d = driver()
    d.start()
    d.admit("queued", position=1)
    aborted = d.abort("not now")
    ended = d.ended()
    assert (ended["status"], ended["reason"], ended["turns"], ended["cost_usd"]) == ("aborted", "not now", 0, 0.0)
    assert d.state.status == "idle" and [s.release for s in slots(aborted)] == [["run1"]]
    late = d.admit("granted", run_id="run1")
    assert late.state is None and [s.release for s in slots(late)] == [["run1"]]
    assert d.admit("refused", run_id="run1").effects == []


def test_every_end_gives_the_slot_back_and_reports_the_runs_totals() -> None:
    d = driver()
    d.start(limits={"max_turns": 2})
    d.admit("granted")
    turn = d.answer("Adding.", call("t1"), usage=(30, 5))
    (counted,) = usage(turn)
    assert counted.totals == [("run1", 35, 0.0)] and slots(turn) == []
    d.tools("3")
    d.message("and then?")  # past the turn limit: the next run follows the end
    done = d.answer("It is 3.", usage=(40, 5))
    assert d.ended()["status"] == "max_turns"
    (settle,) = slots(done)
    assert (settle.release, settle.acquire) == (["run1"], "run1.next"), "one call: the end and the next run"
    (counted,) = usage(done)
    assert counted.totals == [("run1", 80, 0.0)], "the ended run's totals, carried in the state"
    assert d.state.status == "queued" and d.state.ended_run is not None and d.state.ended_run.tokens == 80
    d.admit("granted")
    nxt = d.answer("Adding again.", call("t2"), usage=(10, 2))
    assert sorted(usage(nxt)[0].totals) == [("run1", 80, 0.0), ("run1.next", 12, 0.0)], \
        "the ended run's totals go again with every count, until its own end was surely counted"


def test_the_watchdog_and_undeliverable_work_release_as_an_end_does() -> None:
    from loopwire.router.core import inputs as i

    d = driver()
    d.start()
    d.admit("granted")
    failed = d.apply(i.UndeliverableInput(input_id="dead:1", run_id="run1", step_id=d.pending, what="x", reason="y"))
    assert d.ended()["status"] == "failed" and [s.release for s in slots(failed)] == [["run1"]]


def test_a_spent_day_refuses_starts_and_follow_ups() -> None:
    d = driver()
    d.tenant_today = (100, 0.0)
    refused = d.start()
    assert refused.state is None and d.of("error", refused)[0]["code"] == "quota_exceeded"
    assert d.of("error", refused)[0]["limit"] == "tokens_per_day"
    other = driver("globex.s1")  # `*`: a cost allowance only
    other.tenant_today = (10_000, 0.5)
    assert other.start().state is not None
    idle = driver("globex.s2")
    idle.tenant_today = (0, 1.0)
    assert idle.of("error", idle.message("more"))[0]["limit"] == "usd_per_day"
    assert idle.of("error", idle.steer("more"))[0]["limit"] == "usd_per_day"


def test_a_run_that_spends_the_day_converges_with_reason_tenant_quota() -> None:
    d = driver()
    d.tenant_today = (70, 0.0)
    d.start()
    d.admit("granted")
    d.answer("Adding.", call("t1"), usage=(25, 10))  # 70 + 35 >= 100: the tool still runs
    assert d.run.budget.quota_spent and d.state.run is not None
    d.tools("3")
    work = d.work()
    assert work["offer_tools"] is False or work["tools"] == [], "the converging generation offers no tools"
    d.answer("It is 3, as far as I got.", usage=(10, 5))
    ended = d.ended()
    assert (ended["status"], ended["reason"]) == ("budget_exhausted", "tenant_quota")
    assert ended["final_text"] == "It is 3, as far as I got."


def test_a_granted_slot_on_a_spent_day_ends_the_waiting_run() -> None:
    d = driver()
    d.start()
    d.admit("queued", position=1)
    d.tenant_today = (150, 0.0)
    gone = d.admit("granted")
    assert [e["code"] for e in d.of("error", gone)] == ["quota_exceeded"]
    assert (d.ended()["status"], d.ended()["reason"]) == ("budget_exhausted", "tenant_quota")
    assert d.state.status == "idle" and [s.release for s in slots(gone)] == [["run1"]]


def test_a_model_without_a_price_warns_once_that_only_its_tokens_count() -> None:
    d = driver("globex.s1")  # usd_per_day
    d.start(model={"primary": "acme-own-model"})
    d.admit("granted")
    d.answer("Adding.", call("t1"))
    d.tools("3")
    d.answer("3.")
    warnings = [w["code"] for w in d.of("warning")]
    assert warnings.count("tenant_unpriced") == 1 and warnings.count("unknown_price") == 1
    assert [c.totals for c in usage(d.decisions[-1])] == [[("run1", 30, 0.0)]]


def test_without_tenants_the_star_entry_limits_the_whole_deployment() -> None:
    cfg = replace(CFG, tenant_limits=TenantLimits.parse({"*": TenantLimit(max_running=1)}, tenants=False))
    d = driver("plain", cfg)
    d.start()
    assert d.state.status == "queued"
    assert cfg.tenant_limits is not None and cfg.tenant_limits.tenant_of("plain") == "*"


def test_without_tenant_limits_nothing_waits_and_nothing_is_settled() -> None:
    d = Driver(CFG, sid="acme.s1")
    started = d.start()
    assert d.state.status == "running" and slots(started) == [] and d.state.waiting is None
    done = d.answer("Hi.")
    assert usage(done) == [] and slots(done) == [] and d.state.ended_run is None
