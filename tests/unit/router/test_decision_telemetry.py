"""The shell counts metrics from committed decisions (never from a replay) and performs
cancel notices on core NATS."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import decide
from loopwire.router.core.effects import PublishNotice
from loopwire.router.shell.decision_telemetry import count_decision
from loopwire.router.shell.service import RouterService
from loopwire.settings import Settings
from loopwire.shared.contract.protocol import StartRun
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.observability import metrics
from tests.router_driver import CFG, Driver, call

pytestmark = pytest.mark.unit


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_counters_follow_the_decisions() -> None:
    before = {
        "started": sample("loopwire_runs_started_total", {"profile": "agentic"}),
        "ended": sample("loopwire_runs_ended_total", {"profile": "agentic", "status": "loop_terminated"}),
        "turns": sample("loopwire_turns_total", {"profile": "agentic"}),
        "tokens": sample("loopwire_tokens_total", {"direction": "input", "model": "m-observe"}),
        "loops": sample("loopwire_loop_detections_total", {"detection": "repeated_tool_call",
                                                          "escalation": "redirect"}),
        "vacuous": sample("loopwire_vacuous_retries_total"),
        "nudges": sample("loopwire_commitment_nudges_total"),
        "steers": sample("loopwire_steers_total"),
        "warnings": sample("loopwire_budget_warnings_total"),
    }
    d = Driver()
    d.start(input="add 1 and 2", model={"primary": "m-observe"}, limits={"max_total_tokens": 1_000_000})
    d.answer(".")                                    # vacuous retry
    d.answer("Let me add them.")                     # commitment nudge
    d.steer("use the add tool")                      # steer
    for n in range(3):                               # loop: redirect on the third
        d.answer(call(f"t{n}"), usage=(300_000 if n == 0 else 10, 5))
        if n < 2:
            d.tools()
    d.answer(call("t3"))                             # switch: the temperature (no fallback)
    d.answer(call("t4"))                             # terminate
    d.answer("It is 3.")
    for decision in d.decisions:
        count_decision(decision, "agentic")
    assert sample("loopwire_runs_started_total", {"profile": "agentic"}) == before["started"] + 1
    assert sample("loopwire_runs_ended_total", {"profile": "agentic", "status": "loop_terminated"}) == \
        before["ended"] + 1
    assert sample("loopwire_turns_total", {"profile": "agentic"}) == before["turns"] + 8
    assert sample("loopwire_tokens_total", {"direction": "input", "model": "m-observe"}) == \
        before["tokens"] + 10 * 7 + 300_000
    assert sample("loopwire_loop_detections_total", {"detection": "repeated_tool_call",
                                                     "escalation": "redirect"}) == before["loops"] + 1
    assert sample("loopwire_vacuous_retries_total") == before["vacuous"] + 1
    assert sample("loopwire_commitment_nudges_total") == before["nudges"] + 1
    assert sample("loopwire_steers_total") == before["steers"] + 1
    assert sample("loopwire_budget_warnings_total") == before["warnings"]


def test_a_replayed_outbox_counts_nothing() -> None:
    d = Driver()
    d.start(input="hi")
    replay = decide(d.state, i.StartInput(input_id="in:1", new_id="run1", body=StartRun(input="hi")), CFG)
    assert replay.replay and replay.effects
    before = sample("loopwire_runs_started_total", {"profile": "agentic"})
    count_decision(replay, "agentic")
    assert sample("loopwire_runs_started_total", {"profile": "agentic"}) == before


class FakeBus:
    def __init__(self) -> None:
        self.published: list[tuple[str, Any]] = []
        self.nc = self

    async def publish(self, subject: str, data: bytes) -> None:
        self.published.append((subject, orjson.loads(data)))


async def test_the_shell_publishes_cancel_notices_on_the_session_subject() -> None:
    bus = FakeBus()
    ctx = SimpleNamespace(settings=Settings(), subjects=Subjects("lwx"), bus=bus)
    publisher = RouterService(ctx).publisher  # type: ignore[arg-type]
    await publisher.perform("s9", [PublishNotice(body={"run_id": "r1"})])
    assert bus.published == [("lwx.ctl.s9.cancel", {"run_id": "r1"})]


def test_the_prompt_caches_share_is_counted_by_model() -> None:
    from loopwire.shared.contract.envelopes import Usage
    labels = {"model": "m-cache"}
    before = (sample("loopwire_cache_tokens_total", {"kind": "read", **labels}),
              sample("loopwire_cache_tokens_total", {"kind": "write", **labels}),
              sample("loopwire_tokens_total", {"direction": "input", **labels}))
    d = Driver()
    d.start(input="hi", model={"primary": "m-cache"})
    d.answer("Hello.", usage_obj=Usage(input_tokens=10, output_tokens=3, cache_read_input_tokens=700,
                                       cache_creation_input_tokens=90))
    for decision in d.decisions:
        count_decision(decision, "agentic")
    assert sample("loopwire_cache_tokens_total", {"kind": "read", **labels}) == before[0] + 700
    assert sample("loopwire_cache_tokens_total", {"kind": "write", **labels}) == before[1] + 90
    assert sample("loopwire_tokens_total", {"direction": "input", **labels}) == before[2] + 800, "all input"
