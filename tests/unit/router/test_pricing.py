"""Honest numbers: prices for every model the docs name (checked against the maintained
`genai-prices` list), and a run whose model has no price has cost_usd null, not 0, with
one `warning` per run and model."""

from __future__ import annotations

import re

import pytest

from loopwire.router.core import inputs as i
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.events import validate_event
from loopwire.shared.contract.protocol import StartRun
from loopwire.shared.runtime.pricing import DEFAULT_PRICES, cost_usd, price_for
from tests.paths import REPO
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit

ROOT = REPO
MODEL_ID = re.compile(r"\bclaude-(?:opus|sonnet|haiku|3-5-haiku|3-7-sonnet)[a-z0-9.-]*[a-z0-9]")


def models_named_in_docs() -> set[str]:
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    return set(MODEL_ID.findall(text))


def test_every_model_the_docs_name_has_a_price_that_agrees_with_genai_prices() -> None:
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    named = models_named_in_docs()
    assert "claude-sonnet-4-5" in named, "the docs' default model is found"
    for model in sorted(named):
        price = price_for(model)
        assert price is not None, f"{model} is named in the docs but has no price"
        # Well under any long-context tier, so the base price applies on both sides.
        usage = PriceUsage(input_tokens=10_000, output_tokens=1_000)
        theirs = calc_price(usage, model, provider_id="anthropic").total_price
        ours = cost_usd(model, Usage(input_tokens=10_000, output_tokens=1_000))
        assert ours is not None and ours == pytest.approx(float(theirs), rel=1e-6), model


def test_a_dated_id_finds_its_family_and_an_unknown_model_has_no_cost() -> None:
    assert price_for("claude-sonnet-4-5-20250929") == DEFAULT_PRICES["claude-sonnet-4"]
    assert cost_usd("mystery-model-9", Usage(input_tokens=100, output_tokens=10)) is None
    assert cost_usd("loopwire-demo", Usage(input_tokens=100, output_tokens=10)) is None


def test_a_model_without_a_price_makes_the_cost_null_with_one_warning_per_run() -> None:
    d = Driver()
    d.start(input="add", model={"primary": "mystery-model-9"})
    d.answer(call("t1"), model="mystery-model-9")
    d.tools("3")
    d.answer("It is 3.", model="mystery-model-9")
    (warning,) = d.of("warning")
    assert warning["code"] == "unknown_price" and "mystery-model-9" in warning["message"]
    ended = d.ended()
    assert ended["status"] == "completed" and ended["cost_usd"] is None
    assert d.state.cost_unknown
    for event in d.events:
        validate_event({"v": 1, "session_id": "s1", "seq": 1, "ts": "2026-01-01T00:00:00Z", "run_id": "run1",
                        "kind": event.kind, **event.fields})


def test_a_priced_run_keeps_its_cost_and_loopwires_own_models_need_no_warning() -> None:
    d = Driver()
    d.start(input="hi", model={"primary": "claude-sonnet-4-5"})
    d.answer("Hello.", model="claude-sonnet-4-5", usage=(1000, 100))
    assert d.ended()["cost_usd"] == pytest.approx((1000 * 3 + 100 * 15) / 1e6) and d.of("warning") == []

    demo = Driver()
    demo.start(input="hi")
    demo.answer("Hello.", model="loopwire-demo")
    assert demo.ended()["cost_usd"] is None and demo.of("warning") == []


def test_a_start_naming_unknown_tools_gets_a_warning_listing_them() -> None:
    d = Driver()
    d.apply(i.StartInput(input_id="in:x", new_id="run1", body=StartRun.model_validate(
        {"input": "hi", "tools": ["add", "nosuchtool", "nor_this"]}), unknown_tools=["nosuchtool", "nor_this"]))
    (warning,) = d.of("warning")
    assert warning["code"] == "unknown_tools" and warning["tools"] == ["nosuchtool", "nor_this"]
    assert "nosuchtool, nor_this" in warning["message"]
    assert d.kinds()[:2] == ["run.started", "warning"]


def test_the_core_gets_its_prices_in_its_config_the_built_in_table_under_the_operators() -> None:
    from loopwire.router.core.config import CoreConfig
    from loopwire.settings import Settings

    own = {"my-model": {"input": 2.0, "output": 4.0}, "claude-sonnet-4": {"input": 1.0, "output": 1.0}}
    cfg = CoreConfig.from_settings(Settings(prices=own))
    assert cfg.prices["my-model"] == own["my-model"] and cfg.prices["claude-sonnet-4"] == own["claude-sonnet-4"]
    assert cfg.prices["claude-opus-4"] == DEFAULT_PRICES["claude-opus-4"]
    assert CoreConfig().prices == DEFAULT_PRICES, "no overrides: the built-in table alone"
    d = Driver(cfg)
    d.start(input="hi", model={"primary": "my-model-1"})
    d.answer("Hello.", model="my-model-1", usage=(1_000_000, 0))
    assert d.ended()["cost_usd"] == pytest.approx(2.0) and d.of("warning") == []
