"""The fake Messages API's own limits and latency (loopwire.testing.fake_provider_limits),
through the official SDK: what a user's suite relies on to test loopwire's model limits."""

from __future__ import annotations

import asyncio
import time

import anthropic
import pytest

from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


def client(server: FakeAnthropic) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


async def ask(sdk: anthropic.AsyncAnthropic, model: str = "claude-x") -> str:
    reply = await sdk.messages.create(model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    return reply.content[0].text  # type: ignore[union-attr]


async def test_past_its_limits_the_provider_answers_429_with_retry_after(
        anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    server = anthropic_server
    server.responder = lambda body: {"text": "ok", "delay_s": 0.3}
    server.enforce("claude-x", max_in_flight=1, retry_after=2.5)
    sdk = client(server)
    results = await asyncio.gather(ask(sdk), ask(sdk), return_exceptions=True)
    refused = [r for r in results if isinstance(r, anthropic.RateLimitError)]
    assert len(refused) == 1 and "ok" in results
    assert refused[0].response.headers["retry-after"] == "2.5"
    server.enforce("claude-x", rpm=2, window_s=60)
    assert [await ask(sdk), await ask(sdk)] == ["ok", "ok"]
    with pytest.raises(anthropic.RateLimitError):
        await ask(sdk)
    assert await ask(sdk, "other-model") == "ok", "a limit is per model"
    assert len(server.rate_limited) == 2
    await sdk.close()


async def test_a_latency_model_paces_the_stream(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    server = anthropic_server
    server.responder = lambda body: {"text": "one two three four five six"}
    server.latency("*", first_token_s=0.3, total_s=0.9, chunks=3)
    sdk = client(server)
    started = time.monotonic()
    arrivals: list[float] = []
    async with sdk.messages.stream(model="claude-x", max_tokens=50,
                                   messages=[{"role": "user", "content": "hi"}]) as stream:
        async for text in stream.text_stream:
            arrivals.append(time.monotonic() - started)
            assert text
        final = await stream.get_final_message()
    assert final.content[0].text == "one two three four five six"  # type: ignore[union-attr]
    assert len(arrivals) == 3
    assert arrivals[0] >= 0.3 and arrivals[-1] >= 0.85
    await sdk.close()
