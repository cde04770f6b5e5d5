"""The memory model in the router core: StartRun `model.memory`, else the operator's
LOOPWIRE_MEMORY_MODEL, else none (memory then uses the run's models); it reaches memory in
every AssembleContext, and the tokens memory spent are priced at its price."""

from __future__ import annotations

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig
from loopwire.router.core.effects import PublishWork
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import GenerationResult, Usage
from loopwire.shared.runtime.pricing import cost_usd
from tests.router_driver import Driver

pytestmark = pytest.mark.unit


def memory_model_asked(d: object) -> str | None:
    (work,) = [e for e in d.effects if isinstance(e, PublishWork)]  # type: ignore[attr-defined]
    assert work.target == "memory.assemble"
    return work.envelope["memory_model"]


def test_startrun_names_the_memory_model() -> None:
    d = Driver(CoreConfig(memory_model="op-model"))
    started = d.start(input="hi", model={"primary": "claude-sonnet-4-5", "memory": "claude-haiku-4-5"})
    assert memory_model_asked(started) == "claude-haiku-4-5"
    run_started = next(e for e in started.effects if getattr(e, "kind", None) == "run.started")
    assert run_started.fields["config"]["memory_model"] == "claude-haiku-4-5"  # rebuilt with the session


def test_the_operator_setting_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWIRE_MEMORY_MODEL", "claude-haiku-4-5")
    d = Driver(CoreConfig.from_settings(Settings()))
    assert memory_model_asked(d.start(input="hi")) == "claude-haiku-4-5"
    # A follow-up's next run keeps it.
    d.answer("hello")
    assert memory_model_asked(d.message("again")) == "claude-haiku-4-5"


def test_without_either_memory_uses_the_run_models() -> None:
    assert memory_model_asked(Driver(CoreConfig()).start(input="hi")) is None


def test_memory_tokens_are_priced_as_the_memory_model() -> None:
    d = Driver(CoreConfig())
    d.start(input="hi", model={"primary": "claude-sonnet-4-5", "memory": "claude-haiku-4-5"})
    extra = Usage(input_tokens=100_000, output_tokens=10_000)
    d.apply(i.GenerationInput(input_id=d.pending, result=GenerationResult(
        session_id="s1", run_id="run1", step_id=d.pending, message={"role": "assistant", "content": [
            {"type": "text", "text": "hello"}]}, stop_reason="end_turn", model="claude-sonnet-4-5",
        usage=Usage(input_tokens=10, output_tokens=5), extra_usage=extra, extra_model="claude-haiku-4-5")))
    run_cost = cost_usd("claude-sonnet-4-5", Usage(input_tokens=10, output_tokens=5))
    assert d.state.cost_usd == pytest.approx(run_cost + cost_usd("claude-haiku-4-5", extra))
