"""Token counting: count_tokens of the local Messages API server through the official SDK,
the cache by content hash (in process and in Redis), the fallback when the endpoint does
not answer, and the estimate's error measured against the server's counts.

Stated bounds (the fake server counts a quarter of the request's JSON characters, so
framing weighs more there than in Anthropic's tokenizer; the calibration absorbs that):
- uncalibrated, over a corpus of chats and tool runs: within 40%;
- calibrated on half of the corpus, on the other half: within 15%;
- within one growing session, after 3 exact counts: within 10%.
"""

from __future__ import annotations

import random
from typing import Any

import anthropic
import pytest

from loopwire.memory.tokens import Estimator, TokenCounter, build_token_counter
from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.runtime.settings import Settings
from loopwire.testing.servers import free_port
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server, count_tokens  # noqa: F401 - fixture
from tests.memory_helpers import agentic, conversation, text

ADD = ToolSpec(name="add", description="Add two numbers.",
               input_schema={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                             "required": ["a", "b"]})
Case = tuple[str | None, list[dict[str, Any]], list[ToolSpec]]


def corpus() -> list[Case]:
    cases: list[Case] = [("You are helpful.", conversation(t, w), []) for t in (1, 3, 10, 40) for w in (2, 20, 200)]
    cases += [(None, agentic(10 + seed * 5, seed, 50 + seed * 200), [ADD]) for seed in range(12)]
    return cases


def server_count(case: Case) -> int:
    system, messages, tools = case
    return count_tokens({"system": system, "messages": messages, "tools": [t.model_dump() for t in tools]})


def error(estimator: Estimator, case: Case) -> float:
    return abs(estimator.estimate(*case) / server_count(case) - 1)


# -- the estimate -------------------------------------------------------------------------------
@pytest.mark.unit
def test_uncalibrated_estimate_is_within_40_percent() -> None:
    estimator = Estimator()
    assert max(error(estimator, case) for case in corpus()) <= 0.40


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(10))
def test_calibrated_estimate_is_within_15_percent_on_unseen_requests(seed: int) -> None:
    cases = corpus()
    random.Random(seed).shuffle(cases)
    estimator = Estimator()
    for case in cases[::2]:
        estimator.calibrate(estimator.tally(*case), server_count(case))
    assert max(error(estimator, case) for case in cases[1::2]) <= 0.15


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["chat", "tools"])
def test_within_a_session_the_estimate_converges(kind: str) -> None:
    estimator = Estimator()
    for turn in range(2, 50):
        case: Case = ("You are helpful.", conversation(turn, 15), []) if kind == "chat" \
            else (None, agentic(turn, seed=1, result_size=300), [ADD])
        if estimator.samples >= 3:
            assert error(estimator, case) <= 0.10, f"turn {turn}"
        estimator.calibrate(estimator.tally(*case), server_count(case))


@pytest.mark.unit
def test_fixed_costs_and_shapes() -> None:
    estimator = Estimator()
    image = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "A" * 100_000}}]}
    assert 1600 <= estimator.message_tokens(image) < 1700, "an image is not its base64 length"
    assert estimator.message_tokens({"role": "user", "content": "hi"}) == \
        estimator.message_tokens(text("user", "hi"))
    nested = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "text", "text": "x" * 350}]}]}
    assert estimator.message_tokens(nested) > 100


# -- count_tokens ------------------------------------------------------------------------------
def client_for(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0)


@pytest.mark.integration
async def test_exact_count_from_the_server_then_from_the_cache(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    counter = TokenCounter(client=client_for(anthropic_server.url))
    system, messages, tools = "You are helpful.", conversation(5), [ADD]
    got = await counter.count("claude-sonnet-4-5", system, messages, tools)
    expected = count_tokens({"system": system, "messages": messages, "tools": [t.model_dump() for t in tools]})
    assert got.exact and got.tokens == expected
    sent = [r for r in anthropic_server.requests if r.path == "/v1/messages/count_tokens"]
    assert len(sent) == 1 and sent[0].body["model"] == "claude-sonnet-4-5"
    assert sent[0].body["tools"][0]["name"] == "add" and sent[0].body["system"] == system

    again = await counter.count("claude-sonnet-4-5", system, messages, tools)
    assert again == got and counter.calls == 1, "the same content is counted once"
    other_model = await counter.count("claude-haiku-4-5", system, messages, tools)
    assert other_model.exact and counter.calls == 2, "a model's tokenizer is its own"
    assert counter.estimator.samples == 2, "every exact count calibrates the estimate"
    await counter.aclose()


@pytest.mark.integration
async def test_the_redis_cache_is_shared_between_replicas(anthropic_server: FakeAnthropic,  # noqa: F811
                                                          redis_client: Any) -> None:
    messages = conversation(3)
    first = TokenCounter(client=client_for(anthropic_server.url), redis=redis_client, cache_ttl_s=60)
    second = TokenCounter(client=client_for(anthropic_server.url), redis=redis_client, cache_ttl_s=60)
    a = await first.count("claude-x", None, messages, [])
    b = await second.count("claude-x", None, messages, [])
    assert a == b and a.exact and (first.calls, second.calls) == (1, 0)
    keys = [k async for k in redis_client.scan_iter("lw:tok:*")]
    assert len(keys) == 1 and 0 < await redis_client.ttl(keys[0]) <= 60
    await first.aclose()
    await second.aclose()


@pytest.mark.integration
async def test_an_unreachable_endpoint_falls_back_to_the_estimate_and_pauses() -> None:
    counter = TokenCounter(client=client_for(f"http://127.0.0.1:{free_port()}"))
    messages = conversation(2)
    got = await counter.count("claude-x", None, messages, [])
    assert not got.exact and got.tokens == counter.estimate(None, messages, [])
    assert not counter.reachable
    await counter.count("claude-x", None, conversation(4), [])
    assert counter.calls == 1, "no second attempt while paused"
    await counter.aclose()


@pytest.mark.integration
async def test_a_server_error_falls_back_too(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    # The fake answers 404 for unknown paths: a proxy without count_tokens, say.
    counter = TokenCounter(client=client_for(anthropic_server.url + "/nowhere"))
    got = await counter.count("claude-x", None, conversation(1), [])
    assert not got.exact and not counter.reachable
    await counter.aclose()


@pytest.mark.unit
def test_the_counter_follows_the_llm_provider() -> None:
    assert build_token_counter(Settings(), environ={}).client is None, "no Anthropic configured: estimate"
    counter = build_token_counter(Settings(), environ={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"})
    assert counter.client is not None
    assert build_token_counter(Settings(memory_token_counting="estimate"),
                               environ={"ANTHROPIC_API_KEY": "k"}).client is None
    with pytest.raises(ValueError, match="auto, api or estimate"):
        build_token_counter(Settings(memory_token_counting="magic"), environ={})


@pytest.mark.integration
async def test_content_by_reference_is_counted_at_its_full_size(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    from loopwire.shared.stores.blobs import REF_KEY

    ref = {"type": "text", "text": "preview...", REF_KEY: {"sha256": "ab" * 32, "bytes": 400_000}}
    messages = [text("user", "read the file"),
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [ref]}]}]
    estimator = Estimator()
    assert estimator.message_tokens(messages[2]) > 100_000, "the estimate sees the full size"
    counter = TokenCounter(client=client_for(anthropic_server.url))
    got = await counter.count("claude-x", None, messages, [])
    sent = [r.body for r in anthropic_server.requests if r.path == "/v1/messages/count_tokens"]
    assert len(sent) == 1 and REF_KEY not in str(sent[0]), "the API never sees a reference"
    assert not got.exact and got.tokens > 100_000
    await counter.aclose()
