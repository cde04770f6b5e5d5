"""The memory model through the contract: with StartRun `model.memory`, the compaction
summary is asked of that model (the fake Messages API sees it), the run's generations
of the run's own model, and the summary's tokens count in the run's usage and cost at
the memory model's price."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.memory.compaction import SUMMARY_SYSTEM
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.runtime.pricing import cost_usd
from tests.fakes.anthropic_server import FakeAnthropic

from .events import SessionEvents

pytestmark = pytest.mark.e2e

RUN_MODEL = "claude-sonnet-4-5"
MEMORY_MODEL = "claude-haiku-4-5"
# Fixed usage per call, so the expected cost is exact: a summary costs a hundred times
# a generation, at whichever model's price it is counted.
GENERATION_USAGE = {"input_tokens": 1000, "output_tokens": 100}
SUMMARY_USAGE = {"input_tokens": 100_000, "output_tokens": 10_000}


def answering(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("system") == SUMMARY_SYSTEM:
        return {"text": "Summary: the user sent long messages.", "usage": SUMMARY_USAGE}
    return {"text": "Noted.", "usage": GENERATION_USAGE}


async def test_compaction_summaries_use_the_memory_model_and_are_priced_as_it(
        nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.responder = answering
    s = f"e2e-memmodel-{uuid.uuid4().hex[:8]}"
    padding = "A long message that fills the small context window quickly. " * 30  # ~450 tokens
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "Message 1. " + padding, "profile": "conversational",
                                   "model": {"primary": RUN_MODEL, "memory": MEMORY_MODEL},
                                   "limits": {"context_window": 2500}})
        await ev.wait_for("run.ended")
        for n in range(2, 9):
            await ev.publish("message", {"content": f"Message {n}. {padding}"})
            await ev.wait_for("run.ended", count=n)
            if ev.of("compaction"):
                break
    ev.check_bodies()
    compaction = ev.of("compaction")[0]
    assert compaction["method"] == "summary", compaction

    summaries = [r for r in fake.message_requests if r.get("system") == SUMMARY_SYSTEM]
    others = [r for r in fake.message_requests if r.get("system") != SUMMARY_SYSTEM]
    assert summaries and {r["model"] for r in summaries} == {MEMORY_MODEL}
    assert others and {r["model"] for r in others} == {RUN_MODEL}

    # The run whose generation was compacted carries the summary's tokens and cost.
    ended = next(e for e in ev.of("run.ended") if e["run_id"] == compaction["run_id"])
    n_summaries = len(summaries)
    generation = Usage(**GENERATION_USAGE)
    summary = Usage(input_tokens=SUMMARY_USAGE["input_tokens"] * n_summaries,
                    output_tokens=SUMMARY_USAGE["output_tokens"] * n_summaries)
    assert ended["usage"] == {"input_tokens": generation.input_tokens + summary.input_tokens,
                              "output_tokens": generation.output_tokens + summary.output_tokens,
                              "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    expected = cost_usd(RUN_MODEL, generation) + cost_usd(MEMORY_MODEL, summary)
    assert ended["cost_usd"] == pytest.approx(expected)
    assert ended["cost_usd"] < cost_usd(RUN_MODEL, generation + summary) / 2, "priced as the run's model"
