"""The context guard with the estimator and a scripted summariser: when it compacts,
what it sends, incremental summaries, the fallback when summarising fails, the reduced
context after a context_too_long error, and the pressure note."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from loopwire.memory import compaction as c
from loopwire.memory.context_guard import Context, ContextGuard, GuardConfig, SummaryFailed
from loopwire.memory.tokens import TokenCounter
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import AssembleContext, Usage
from tests.memory_helpers import agentic, assert_valid_request, conversation, text

pytestmark = pytest.mark.unit


class Summariser:
    """Records each request; answers with a short summary naming what it saw."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, list[dict[str, Any]], int]] = []
        self.fail = fail

    async def __call__(self, suffix: str, system: str, messages: list[dict[str, Any]],
                       max_tokens: int) -> tuple[str, Usage]:
        self.calls.append((suffix, system, messages, max_tokens))
        if self.fail:
            raise SummaryFailed("no llm service answers")
        body = messages[0]["content"][0]["text"]
        facts = "answer 0 seen" if "answer 0 " in body else "nothing"
        return f"summary #{len(self.calls)}: {facts}", Usage(input_tokens=100, output_tokens=20)


def context(history: list[dict[str, Any]], record: c.CompactionRecord | None = None,
            system: str | None = "You are helpful.") -> Context:
    start = record.covers if record else 1
    return Context(model="claude-x", system=system, tools=[], head=history[0], rest=history[start:], start=start,
                   record=record)


def tokens_of(counter: TokenCounter, ctx: Context, messages: list[dict[str, Any]]) -> int:
    return counter.estimate(ctx.system, messages, ctx.tools)


async def test_under_the_threshold_nothing_changes() -> None:
    history = conversation(turns=3)
    guard = ContextGuard(TokenCounter(), Summariser())
    out = await guard.fit(context(history), GuardConfig(window=100_000), "r:g1")
    assert out.messages == history and out.event is None and out.record is None and out.note is None
    assert not out.exact, "far under the threshold: the estimate decides, no count_tokens call"


async def test_at_the_threshold_the_oldest_span_is_summarised() -> None:
    history = conversation(turns=120)
    original = copy.deepcopy(history)
    summariser = Summariser()
    counter = TokenCounter()
    full = counter.estimate("You are helpful.", history, [])
    cfg = GuardConfig(window=int(full / 0.9))  # 90% full: over the 80% threshold
    out = await ContextGuard(counter, summariser).fit(context(history), cfg, "r:g7")

    assert history == original, "the history itself is never touched"
    assert len(summariser.calls) == 1
    suffix, system, request, max_tokens = summariser.calls[0]
    assert suffix == "compact.0" and system == c.SUMMARY_SYSTEM and max_tokens == cfg.summary_budget
    assert out.record is not None and out.record.step_id == "r:g7"
    covers = out.record.covers
    assert history[covers]["role"] == "assistant"
    assert out.messages[1:] == history[covers:], "the tail is verbatim"
    assert out.messages[0]["content"][0] == history[0]["content"][0], "the first request is kept"
    assert "answer 0 seen" in out.messages[0]["content"][1]["text"]
    assert_valid_request(out.messages)
    assert out.event is not None and out.event["method"] == "summary"
    assert out.event["tokens_before"] > out.event["tokens_after"]
    assert out.tokens <= cfg.target + cfg.summary_budget, "compacted well under the threshold"
    assert out.usage == Usage(input_tokens=100, output_tokens=20) == out.record.usage
    # The last two turns (assistant + user) stay verbatim.
    assert history[-4:] == out.messages[-4:]


async def test_the_next_compaction_is_incremental() -> None:
    history = conversation(turns=120)
    counter = TokenCounter()
    summariser = Summariser()
    cfg = GuardConfig(window=int(counter.estimate("You are helpful.", history, []) / 0.9))
    first = await ContextGuard(counter, summariser).fit(context(history), cfg, "r:g1")
    assert first.record is not None
    # Reusing the record: under the threshold now, nothing is summarised again.
    again = await ContextGuard(counter, summariser).fit(context(history, first.record), cfg, "r:g2")
    assert len(summariser.calls) == 1 and again.event is None and again.messages == first.messages

    # The conversation goes on until the threshold is reached again.
    later = [text(m["role"], "later " + m["content"][0]["text"]) for m in conversation(turns=100)[1:]]
    longer = history + later
    out = await ContextGuard(counter, summariser).fit(context(longer, first.record), cfg, "r:g3")
    assert out.record is not None and out.record.covers > first.record.covers
    _, _, request, _ = summariser.calls[-1]
    body = request[0]["content"][0]["text"]
    assert body.startswith("<previous-summary>\nsummary #1"), "the previous summary is folded in"
    assert "Assistant: answer 0 " not in body, "messages summarised before are not sent again"
    assert_valid_request(out.messages)


async def test_a_span_larger_than_one_request_is_summarised_in_chunks() -> None:
    history = conversation(turns=40)
    counter = TokenCounter()
    summariser = Summariser()
    cfg = GuardConfig(window=int(counter.estimate("You are helpful.", history, []) / 0.95), compaction_at_pct=0.5)
    out = await ContextGuard(counter, summariser).fit(context(history), cfg, "r:g1")
    assert len(summariser.calls) >= 2
    assert [call[0] for call in summariser.calls] == [f"compact.{i}" for i in range(len(summariser.calls))]
    second = summariser.calls[1][2][0]["content"][0]["text"]
    assert second.startswith("<previous-summary>\nsummary #1"), "each chunk folds into the summary so far"
    assert out.record is not None and out.record.summary.startswith(f"summary #{len(summariser.calls)}")
    assert out.usage.input_tokens == 100 * len(summariser.calls)
    assert_valid_request(out.messages)


@pytest.mark.parametrize("seed", range(12))
async def test_tool_runs_compact_into_valid_requests(seed: int) -> None:
    history = agentic(steps=40, seed=seed, result_size=400)
    counter = TokenCounter()
    cfg = GuardConfig(window=int(counter.estimate(None, history, []) / 0.85), keep_turns=2)
    out = await ContextGuard(counter, Summariser()).fit(context(history, system=None), cfg, f"r:g{seed}")
    assert out.event is not None
    assert_valid_request(out.messages)
    assert out.messages[0]["content"][0] == history[0]["content"][0]
    assert out.tokens < cfg.threshold


async def test_a_failed_summary_drops_the_oldest_messages_from_the_request_only() -> None:
    history = agentic(steps=30, seed=3, result_size=300)
    original = copy.deepcopy(history)
    counter = TokenCounter()
    cfg = GuardConfig(window=int(counter.estimate(None, history, []) / 0.9))
    out = await ContextGuard(counter, Summariser(fail=True)).fit(context(history, system=None), cfg, "r:g2")
    assert history == original
    assert out.record is None, "nothing stored: the next generation tries to summarise again"
    assert out.event is not None and out.event["method"] == "drop"
    assert out.tokens < cfg.threshold
    assert "earlier messages were left out" in out.messages[0]["content"][-1]["text"]
    assert_valid_request(out.messages)
    assert out.messages[-1] == history[-1]


async def test_reduce_context_compacts_to_half_the_window_even_under_the_threshold() -> None:
    history = conversation(turns=30)
    counter = TokenCounter()
    full = counter.estimate("You are helpful.", history, [])
    cfg = GuardConfig(window=int(full / 0.6), reduce=True)  # 60%: under the threshold
    out = await ContextGuard(counter, Summariser()).fit(context(history), cfg, "r:g3")
    assert out.event is not None and out.tokens <= cfg.window * 0.5
    assert_valid_request(out.messages)
    assert out.messages[-2:] == history[-2:], "the latest turn is kept"


async def test_the_pressure_note_above_70_percent() -> None:
    history = conversation(turns=10)
    counter = TokenCounter()
    tokens = counter.estimate("You are helpful.", history, [])
    cfg = GuardConfig(window=int(tokens / 0.75))  # 75%: pressure, no compaction
    out = await ContextGuard(counter, Summariser()).fit(context(history), cfg, "r:g1")
    assert out.event is None and out.messages == history
    assert out.note == ("Context is at 75% capacity — prefer concise responses and avoid requesting "
                        "large tool outputs.")
    relaxed = await ContextGuard(counter, Summariser()).fit(context(history), GuardConfig(window=tokens * 2), "r:g1")
    assert relaxed.note is None


async def test_nothing_to_summarise_sends_the_context_as_it_is() -> None:
    history = conversation(turns=1, words=2000)  # u a u: one huge turn
    counter = TokenCounter()
    cfg = GuardConfig(window=1000)
    out = await ContextGuard(counter, Summariser()).fit(context(history), cfg, "r:g1")
    assert out.messages == history and out.event is None
    assert out.note is not None and "100% capacity" in out.note


def test_config_from_settings_and_envelope() -> None:
    env = AssembleContext(session_id="s", run_id="r", step_id="r:g1", history_len=1, models=["m"],
                          max_tokens=100, context_window=50_000, compaction_at_pct=0.5)
    cfg = GuardConfig.of(Settings(), env)
    assert (cfg.window, cfg.threshold, cfg.pressure_pct) == (50_000, 25_000, 0.7)
    capped = GuardConfig.of(Settings(context_window_cap=8000), env)
    assert capped.window == 8000 and capped.summary_budget == 1024
    assert GuardConfig.of(Settings(), env.model_copy(update={"reduce_context": True})).target == 25_000


async def test_a_pressure_pct_of_0_turns_the_note_off() -> None:
    history = conversation(turns=10)
    counter = TokenCounter()
    tokens = counter.estimate("You are helpful.", history, [])
    for window in (int(tokens / 0.75), tokens * 2):  # at 75% (noted at the default) and at 50%
        out = await ContextGuard(counter, Summariser()).fit(context(history), GuardConfig(window=window, pressure_pct=0),
                                                            "r:g1")
        assert out.event is None and out.messages == history and out.note is None
    env = AssembleContext(session_id="s", run_id="r", step_id="r:g1", history_len=1, models=["m"],
                          max_tokens=100, context_window=50_000, compaction_at_pct=0.5)
    assert GuardConfig.of(Settings(memory_pressure_pct=0), env).pressure_at == 0
