"""The Anthropic provider through the real SDK, against the fake Messages API server
(tests/fakes/anthropic_server.py): streaming, tool_use assembly, usage, retries and
fallbacks, and the fake's standalone process mode."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from loopwire.llm.anthropic_model import PLACEHOLDER_API_KEY, AnthropicModel, build_client
from loopwire.llm.errors import ModelCallError
from loopwire.llm.fallback import FallbackModel
from loopwire.llm.model_call import ModelRequest
from loopwire.llm.retrying import RetryingModel, RetryPolicy
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import ToolSpec, Usage
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_server  # noqa: F401 - fixture
from tests.model_streams import Streamed
from tests.paths import REPO

pytestmark = pytest.mark.integration

ROOT = REPO
CALC = ToolSpec(name="calculator", description="Evaluate arithmetic.",
                input_schema={"type": "object", "properties": {"expression": {"type": "string"}},
                              "required": ["expression"]})


@pytest.fixture
async def model(anthropic_server: FakeAnthropic) -> AsyncIterator[AnthropicModel]:  # noqa: F811
    m = AnthropicModel(build_client(Settings(llm_timeout_s=10), {"ANTHROPIC_BASE_URL": anthropic_server.url}))
    yield m
    await m.aclose()


def req(text: str = "hello", model: str = "claude-test", **kw: object) -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": text}], max_tokens=256, **kw)  # type: ignore[arg-type]


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def runner(model: AnthropicModel, models: list[str], sleeps: Sleeps) -> FallbackModel:
    """The one client asked for each of `models`, retried (as step_chain.py builds the chain)."""
    return FallbackModel({m: RetryingModel(model, RetryPolicy(max_retries=2, base_delay_s=0.05), sleep=sleeps)
                          for m in models})


async def test_text_streams_in_order_and_matches_the_final_text(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    text = "Streaming works: one piece after another, in order, until the very last word."
    delay = 0.3
    anthropic_server.script("*", [{"text": text, "chunk_delay_s": delay}])
    sink = Streamed()
    response = await sink.run(model, req(system="be brief"))
    assert len(sink.pieces) >= 4
    assert "".join(sink.pieces) == text == response.text()
    # pieces arrived while the stream ran, not all at once at its end: the fake sleeps `delay`
    # before each delta, so first to last spans (pieces - 1) delays; a busy event loop may
    # read a few deltas in one go, so only one delay of that span is required
    assert sink.times[-1] - sink.times[0] >= delay
    assert response.stop_reason == "end_turn" and response.model == "claude-test"
    assert response.response_id and response.response_id.startswith("msg_fake_")
    (sent,) = anthropic_server.message_requests
    assert sent["stream"] is True and sent["system"] == "be brief"
    assert "tools" not in sent and "temperature" not in sent, "omitted when empty / None"


async def test_tool_use_is_assembled_from_several_json_deltas(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    tool_input = {"expression": "15 * 26 + 5", "precision": 2, "notes": ["a long list", "of values"]}
    spec = {"text": "Let me compute that.", "tool_use": [{"name": "calculator", "input": tool_input, "id": "toolu_1"}]}
    # the fake cuts the input JSON into several partial_json pieces, as the API does
    message = anthropic_server.build_message({"model": "m", "messages": []}, spec)
    partials = [e for name, e in anthropic_server.stream_events(message, spec)
                if name == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]
    assert len([p for p in partials if p["delta"]["partial_json"]]) >= 3

    anthropic_server.script("*", [spec])
    sink = Streamed()
    response = await sink.run(model, req("What is 15 * 26 + 5?", tools=[CALC], temperature=0.0))
    assert "".join(sink.pieces) == "Let me compute that."
    assert response.stop_reason == "tool_use"
    assert response.message["content"] == [
        {"type": "text", "text": "Let me compute that."},
        {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": tool_input},
    ]
    (sent,) = anthropic_server.message_requests
    assert sent["tools"] == [{"name": "calculator", "input_schema": CALC.input_schema,
                              "description": "Evaluate arithmetic."}]
    assert sent["temperature"] == 0.0


async def test_usage_is_the_final_messages_not_a_sum_of_events(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    spec = {"text": "counted", "usage": {"input_tokens": 1234, "output_tokens": 56, "cache_read_input_tokens": 100}}
    message = anthropic_server.build_message({"model": "m", "messages": []}, spec)
    events = dict((name, e) for name, e in anthropic_server.stream_events(message, spec))
    # both events report usage: a summing client would get 2468 input / 57 output tokens
    assert events["message_start"]["message"]["usage"]["input_tokens"] == 1234
    assert events["message_start"]["message"]["usage"]["output_tokens"] == 1
    assert events["message_delta"]["usage"] == {"input_tokens": 1234, "output_tokens": 56}

    anthropic_server.script("*", [spec])
    response = await model.generate(req())
    assert response.usage == Usage(input_tokens=1234, output_tokens=56, cache_read_input_tokens=100)
    assert response.usage.total_input() == 1334


async def test_overloaded_twice_then_success_retries(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(529, n=2)
    anthropic_server.script("*", [{"text": "third time lucky"}])
    sleeps = Sleeps()
    result = Streamed()
    response = await result.run(runner(model, ["claude-a", "claude-b"], sleeps), req())
    assert response.text() == "third time lucky" and response.model == "claude-a"
    assert result.fallbacks == [] and result.attempts == 3 and len(sleeps.delays) == 2
    assert [r["model"] for r in anthropic_server.message_requests] == ["claude-a"] * 3


async def test_always_overloaded_primary_switches_to_the_fallback(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(529, n=None, model="claude-a")
    anthropic_server.script("claude-b", [{"text": "the fallback answers"}])
    result = Streamed()
    response = await result.run(runner(model, ["claude-a", "claude-b"], Sleeps()), req())
    assert response.text() == "the fallback answers" and response.model == "claude-b"
    assert result.fallbacks == [{"from_model": "claude-a", "to_model": "claude-b",
                                 "reason": "model_overloaded: Overloaded"}]
    assert [r["model"] for r in anthropic_server.message_requests] == ["claude-a"] * 3 + ["claude-b"]


async def test_always_overloaded_without_fallback_fails_retryable(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(529, n=None)
    with pytest.raises(ModelCallError) as info:
        await runner(model, ["claude-a"], Sleeps()).generate(req())
    err = info.value
    assert (err.code, err.retryable, err.status, err.model) == ("model_overloaded", True, 529, "claude-a")
    assert err.fallbacks == [] and len(anthropic_server.message_requests) == 3


async def test_bad_request_is_not_retried_nor_sent_to_fallbacks(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(400, message="messages.0.content: Input should be a valid list")
    sleeps = Sleeps()
    with pytest.raises(ModelCallError) as info:
        await runner(model, ["claude-a", "claude-b"], sleeps).generate(req())
    assert info.value.code == "bad_request" and not info.value.retryable and info.value.status == 400
    assert "valid list" in info.value.message
    assert len(anthropic_server.message_requests) == 1 and sleeps.delays == []


async def test_prompt_too_long_and_auth_are_terminal(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(400, message="prompt is too long: 201234 tokens > 200000 maximum")
    with pytest.raises(ModelCallError) as info:
        await model.generate(req())
    assert info.value.code == "context_too_long" and not info.value.retryable
    anthropic_server.fail_next(401)
    with pytest.raises(ModelCallError) as info:
        await runner(model, ["claude-a", "claude-b"], Sleeps()).generate(req())
    assert info.value.code == "auth"
    assert len(anthropic_server.message_requests) == 2


async def test_rate_limit_retry_after_sets_the_backoff(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(429, n=1, retry_after=1.5)
    anthropic_server.script("*", [{"text": "ok"}])
    sleeps = Sleeps()
    response = await runner(model, ["claude-a"], sleeps).generate(req())
    assert response.text() == "ok" and sleeps.delays == [1.5]


async def test_overload_mid_stream_voids_the_partial_text_and_retries(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.fail_next(529, mid_stream=True)
    anthropic_server.script("*", [{"text": "the broken first attempt"}, {"text": "the clean second attempt"}])
    sink = Streamed()
    response = await sink.run(runner(model, ["claude-a"], Sleeps()), req())
    assert response.text() == "the clean second attempt"
    assert sink.retracted == [("claude-a", "model_overloaded: Overloaded")]
    assert sink.pieces[0] == "the broken first "  # streamed before the error event
    assert "".join(sink.pieces).endswith("the clean second attempt")


async def test_count_tokens_and_non_streaming_calls_through_the_sdk(anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    client = anthropic.AsyncAnthropic(api_key="test", base_url=anthropic_server.url, max_retries=0)
    messages = [{"role": "user", "content": "count these words please"}]
    first = await client.messages.count_tokens(model="claude-test", messages=messages)  # type: ignore[arg-type]
    second = await client.messages.count_tokens(model="claude-test", messages=messages)  # type: ignore[arg-type]
    assert first.input_tokens == second.input_tokens > 0
    anthropic_server.script("*", [{"text": "plain json"}])
    message = await client.messages.create(model="claude-test", max_tokens=10, messages=messages)  # type: ignore[arg-type]
    assert message.content[0].text == "plain json" and message.usage.input_tokens == first.input_tokens  # type: ignore[union-attr]
    await client.close()


async def test_placeholder_key_is_sent_when_only_the_base_url_is_set(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    await model.generate(req())
    (recorded,) = [r for r in anthropic_server.requests if r.path == "/v1/messages"]
    headers = {k.lower(): v for k, v in recorded.headers.items()}
    # this SDK release sends the key as a bearer token; older ones used x-api-key
    assert PLACEHOLDER_API_KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert recorded.body["messages"] == [{"role": "user", "content": "hello"}]


async def test_responder_answers_long_conversations(
        model: AnthropicModel, anthropic_server: FakeAnthropic) -> None:  # noqa: F811
    anthropic_server.responder = lambda body: {"text": f"turn {len(body['messages'])}"}
    history: list[dict[str, object]] = []
    for i in range(5):
        history.append({"role": "user", "content": f"message {i}"})
        response = await model.generate(ModelRequest(model="m", messages=list(history), max_tokens=20))
        assert response.text() == f"turn {len(history)}"
        history.append(response.message)


async def test_standalone_process_with_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": {"*": [{"text": "from the script file"}]},
                                  "failures": [{"status": 529, "n": 1}]}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.anthropic_server", "--port", "0", "--script", str(script),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=15)).decode()
        assert line.startswith("FAKE_ANTHROPIC_URL=")
        url = line.strip().split("=", 1)[1]
        model = AnthropicModel(build_client(Settings(), {"ANTHROPIC_BASE_URL": url}))
        result = Streamed()
        response = await result.run(FallbackModel({"m": RetryingModel(model, RetryPolicy(2, 0.01), sleep=Sleeps())}),
                                    req())
        assert response.text() == "from the script file" and result.attempts == 2
        # steer the running process over HTTP
        client = anthropic.AsyncAnthropic(api_key="x", base_url=url, max_retries=0)
        await client.post("/_fake/script", body={"responses": [{"text": "steered"}]}, cast_to=object)
        assert (await model.generate(req())).text() == "steered"
        recorded = await client.get("/_fake/requests", cast_to=object)
        assert [r["path"] for r in recorded["requests"]] == ["/v1/messages"] * 3  # type: ignore[index]
        await client.close()
        await model.aclose()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=10)
    assert proc.returncode == 0, "SIGTERM ends the fake cleanly"
