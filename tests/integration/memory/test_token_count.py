"""Exact token counts: count_tokens of the local Messages API server through the official SDK (the llm service's counter, services/llm/token_count.py), the cache by content hash (in process and in Redis), the fallback when the endpoint does not answer."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from loopwire.llm.token_count import AnthropicTokenCount
from loopwire.memory.tokens import Estimator, TokenCounter
from loopwire.shared.contract import keys
from loopwire.testing.servers import free_port
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server, count_tokens  # noqa: F401 - fixture
from tests.memory_helpers import conversation, text
from tests.unit.memory.test_tokens import ADD


# -- count_tokens ------------------------------------------------------------------------------
def exact_for(url: str) -> AnthropicTokenCount:
    return AnthropicTokenCount(anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0))


@pytest.mark.integration
async def test_exact_count_from_the_server_then_from_the_cache(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    exact = exact_for(anthropic_server.url)
    counter = TokenCounter(exact=exact.count)
    system, messages, tools = "You are helpful.", conversation(5), [ADD]
    got = await counter.count("claude-sonnet-4-5", system, messages, tools=tools)
    expected = count_tokens({"system": system, "messages": messages, "tools": [t.model_dump() for t in tools]})
    assert got.exact and got.tokens == expected
    sent = [r for r in anthropic_server.requests if r.path == "/v1/messages/count_tokens"]
    assert len(sent) == 1 and sent[0].body["model"] == "claude-sonnet-4-5"
    assert sent[0].body["tools"][0]["name"] == "add" and sent[0].body["system"] == system

    again = await counter.count("claude-sonnet-4-5", system, messages, tools=tools)
    assert again == got and counter.calls == 1, "the same content is counted once"
    other_model = await counter.count("claude-haiku-4-5", system, messages, tools=tools)
    assert other_model.exact and counter.calls == 2, "a model's tokenizer is its own"
    assert counter.estimator.samples == 2, "every exact count calibrates the estimate"
    await exact.aclose()


@pytest.mark.integration
async def test_the_redis_cache_is_shared_between_replicas(anthropic_server: FakeAnthropic,  # noqa: F811
                                                          redis_client: Any) -> None:
    messages = conversation(3)
    exact = exact_for(anthropic_server.url)
    first = TokenCounter(exact=exact.count, redis=redis_client, cache_ttl_s=60)
    second = TokenCounter(exact=exact.count, redis=redis_client, cache_ttl_s=60)
    a = await first.count("claude-x", None, messages, tools=[])
    b = await second.count("claude-x", None, messages, tools=[])
    assert a == b and a.exact and (first.calls, second.calls) == (1, 0)
    cached = [k async for k in redis_client.scan_iter(keys.token_count("*"))]
    assert len(cached) == 1 and 0 < await redis_client.ttl(cached[0]) <= 60
    await exact.aclose()


@pytest.mark.integration
async def test_an_unreachable_endpoint_falls_back_to_the_estimate_and_pauses() -> None:
    exact = exact_for(f"http://127.0.0.1:{free_port()}")
    counter = TokenCounter(exact=exact.count)
    messages = conversation(2)
    got = await counter.count("claude-x", None, messages, tools=[])
    assert not got.exact and got.tokens == counter.estimate(None, messages, [])
    assert not counter.reachable
    await counter.count("claude-x", None, conversation(4), tools=[])
    assert counter.calls == 1, "no second attempt while paused"
    await exact.aclose()


@pytest.mark.integration
async def test_a_server_error_falls_back_too(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    # The fake answers 404 for unknown paths: a proxy without count_tokens, say.
    exact = exact_for(anthropic_server.url + "/nowhere")
    counter = TokenCounter(exact=exact.count)
    got = await counter.count("claude-x", None, conversation(1), tools=[])
    assert not got.exact and not counter.reachable
    await exact.aclose()


@pytest.mark.integration
async def test_content_by_reference_is_counted_at_its_full_size(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    from loopwire.shared.stores.blobs import REF_KEY

    ref = {"type": "text", "text": "preview...", REF_KEY: {"sha256": "ab" * 32, "bytes": 400_000}}
    messages = [text("user", "read the file"),
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [ref]}]}]
    estimator = Estimator()
    assert estimator.message_tokens(messages[2]) > 100_000, "the estimate sees the full size"
    exact = exact_for(anthropic_server.url)
    counter = TokenCounter(exact=exact.count)
    got = await counter.count("claude-x", None, messages, tools=[])
    sent = [r.body for r in anthropic_server.requests if r.path == "/v1/messages/count_tokens"]
    assert len(sent) == 1 and REF_KEY not in str(sent[0]), "the API never sees a reference"
    assert not got.exact and got.tokens > 100_000
    await exact.aclose()
