"""Model tiers (step_requests.py): with `model.selection: auto` the lightweight work runs on
`model.lightweight`, through the router's pure core."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopwire.router.core import step_requests as model_tiers
from loopwire.router.core.decide import CoreConfig
from loopwire.router.core.profiles import PROFILES
from loopwire.shared.contract.protocol import ModelSpec
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit

AUTO = {"primary": "m-main", "fallbacks": ["m-back"], "lightweight": "m-light", "selection": "auto"}


def test_auto_builds_the_plan_on_the_lightweight_model_and_executes_on_the_primary() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="add 1 and 2", tools=["add"], model=AUTO)
    assert d.work()["models"] == ["m-light", "m-main", "m-back"], "lightweight first, the run's models behind"
    assert d.work()["memory_model"] == "m-light", "memory's calls are lightweight work too"
    d.answer(call("p1", "update_plan", {"plan": [{"step": "add", "status": "pending"}]}), model="m-light")
    assert d.run.profile_phase == "execute"
    assert d.work()["models"] == ["m-main", "m-back"], "the execute phase is the primary's"
    assert [m["model"] for m in d.of("message")] == ["m-light"]


def test_manual_is_the_default_and_ignores_the_lightweight_model() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="go", model={**AUTO, "selection": "manual"})
    assert d.work()["models"] == ["m-main", "m-back"] and d.work()["memory_model"] is None
    assert ModelSpec().selection == "manual"


def test_model_memory_stays_the_explicit_choice_over_auto_and_the_operator_default() -> None:
    spec = ModelSpec.model_validate({**AUTO, "memory": "m-mem"})
    assert model_tiers.memory_model(spec, "m-operator") == "m-mem"
    assert model_tiers.memory_model(ModelSpec.model_validate(AUTO), "m-operator") == "m-light"
    assert model_tiers.memory_model(ModelSpec(), "m-operator") == "m-operator"
    d = Driver(cfg=CoreConfig(prices=PRICES, default_model="m1", memory_model="m-operator"))
    d.start(input="hi")
    assert d.work()["memory_model"] == "m-operator"


def test_a_converging_plan_phase_generation_is_the_primarys() -> None:
    d = Driver()
    d.start(profile="agentic_planned", input="go", model=AUTO, limits={"max_total_tokens": 100})
    d.answer("Sure thing.", usage=(90, 20), model="m-light")
    assert d.run.limits.converging == "budget_exhausted" and d.run.profile_phase == "plan"
    assert d.work()["models"] == ["m-main", "m-back"]


def test_only_the_plan_phase_is_declared_lightweight() -> None:
    declared = {name: dict(p.model_tiers) for name, p in PROFILES.items() if p.model_tiers}
    assert declared == {"agentic_planned": {"plan": "lightweight"}}
    assert model_tiers.MEMORY_TIER == "lightweight"


def test_selection_is_validated() -> None:
    with pytest.raises(ValueError):
        ModelSpec.model_validate({"selection": "cheapest"})


def test_auto_without_a_lightweight_model_warns_once_and_the_operator_default_fills_in() -> None:
    from tests.router_driver import CFG, Driver

    d = Driver()
    d.start(model={"selection": "auto"})
    warnings = [w for w in d.of("warning") if w["code"] == "no_lightweight_model"]
    assert len(warnings) == 1 and d.run.config.lightweight_model is None
    d.answer("done")
    d.message("again")
    assert len([w for w in d.of("warning") if w["code"] == "no_lightweight_model"]) == 2, "once per run"

    operator = Driver(cfg=replace(CFG, lightweight_model="m-light-op"))
    operator.start(model={"selection": "auto"})
    assert operator.run.config.lightweight_model == "m-light-op"
    assert not [w for w in operator.of("warning") if w["code"] == "no_lightweight_model"]
    manual = Driver(cfg=replace(CFG, lightweight_model="m-light-op"))
    manual.start()
    assert manual.run.config.lightweight_model is None and not manual.of("warning")
