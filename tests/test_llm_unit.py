"""The llm service's pure parts: scripted and demo models, error classifier, fallback chain,
provider selection and envelope translation. No network; sleeps are injected."""

from __future__ import annotations

import random

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.llm.errors import ModelCallError, classify
from loopwire.llm.fallback import FallbackModel, FallbackResult, NoBreaker, RetryPolicy
from loopwire.llm.generation import model_chain, model_request, record_key, result_failed, result_ok
from loopwire.llm.model import Model, ModelRequest, ModelResponse
from loopwire.llm.observe import ObservedModel
from loopwire.llm.providers import build_model_factory, provider_description, resolve_provider
from loopwire.llm.scripted_model import (
    DemoModel,
    ScriptedModel,
    ScriptedResponse,
    ScriptExhausted,
    find_expression,
    split_chunks,
)
from loopwire.shared.contract.envelopes import Generate, ToolSpec, Usage
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.settings import Settings

pytestmark = pytest.mark.unit

CALC = ToolSpec(name="calculator", description="Evaluate arithmetic.",
                input_schema={"type": "object", "properties": {"expression": {"type": "string"}}})


def req(text: str = "hello", tools: list[ToolSpec] | None = None, model: str = "m1") -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": text}], max_tokens=100,
                        tools=tools or [])


class Collect:
    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)


# -- scripted model ---------------------------------------------------------------------------
def test_split_chunks_rejoins_exactly() -> None:
    text = "The quick  brown fox jumps over the lazy dog."
    chunks = split_chunks(text)
    assert 1 < len(chunks) <= 4
    assert "".join(chunks) == text
    assert split_chunks("") == []
    assert split_chunks("one") == ["one"]


async def test_scripted_model_plays_in_order_and_fails_on_extra_call() -> None:
    model = ScriptedModel([
        {"text": "first answer with a few words"},
        ScriptedResponse(text="calling", tool_uses=[{"name": "calculator", "input": {"expression": "1+1"}}]),
    ])
    sink = Collect()
    first = await model.generate(req("a"), sink)
    assert first.text() == "first answer with a few words"
    assert "".join(sink.pieces) == first.text() and len(sink.pieces) > 1
    assert first.stop_reason == "end_turn"
    second = await model.generate(req("b"))
    assert second.stop_reason == "tool_use"
    (tool_use,) = second.tool_uses()
    assert tool_use["name"] == "calculator" and tool_use["input"] == {"expression": "1+1"}
    assert tool_use["id"].startswith("toolu_")
    model.assert_done()
    with pytest.raises(ScriptExhausted, match="unexpected model call #3"):
        await model.generate(req("c"))
    assert [r.messages[0]["content"] for r in model.requests] == ["a", "b", "c"]


async def test_scripted_model_errors_callables_and_unused_steps() -> None:
    overloaded = ModelCallError("model_overloaded", "Overloaded", True, 529)
    model = ScriptedModel([overloaded, lambda r: {"text": f"echo {r.messages[-1]['content']}"}, {"text": "x"}])
    with pytest.raises(ModelCallError) as info:
        await model.generate(req())
    assert info.value is overloaded and info.value.model == "m1"
    assert (await model.generate(req("ping"))).text() == "echo ping"
    with pytest.raises(AssertionError, match="1 scripted response"):
        model.assert_done()


async def test_scripted_usage_override_and_word_count() -> None:
    model = ScriptedModel([{"text": "a b c", "usage": {"input_tokens": 7, "output_tokens": 3}}, {"text": "a b c"}])
    assert (await model.generate(req())).usage == Usage(input_tokens=7, output_tokens=3)
    short = (await model.generate(req("one two"))).usage
    longer = (await DemoModel().generate(req("one two three four five six seven eight"))).usage
    assert short.output_tokens == 3 and short.input_tokens == 2
    assert longer.input_tokens == 8


# -- demo brain -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("What is 15 * 26 + 5?", "15 * 26 + 5"),
    ("Compute (2+3)*4.", "(2+3)*4"),
    ("what is 7 × 6", "7 * 6"),
    ("I have 3 apples", None),
])
def test_find_expression(text: str, expected: str | None) -> None:
    assert find_expression(text) == expected


async def test_demo_brain_calls_calculator_then_reads_the_result() -> None:
    demo = DemoModel()
    sink = Collect()
    first = await demo.generate(req("What is 15 * 26 + 5? Use the calculator.", [CALC]), sink)
    assert first.stop_reason == "tool_use"
    (call,) = first.tool_uses()
    assert call["name"] == "calculator" and call["input"] == {"expression": "15 * 26 + 5"}
    assert "".join(sink.pieces) == first.text()
    again = await demo.generate(req("What is 15 * 26 + 5? Use the calculator.", [CALC]))
    assert again.tool_uses()[0]["id"] == call["id"], "ids are deterministic (replicas, redeliveries)"

    history = [
        {"role": "user", "content": "What is 15 * 26 + 5?"},
        first.message,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "395"}]},
    ]
    final = await demo.generate(ModelRequest(model="m1", messages=history, max_tokens=50, tools=[CALC]), sink)
    assert final.text() == "The result is 395." and final.stop_reason == "end_turn"

    history[-1] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                "content": [{"type": "text", "text": "division by zero"}],
                                                "is_error": True}]}
    failed = await demo.generate(ModelRequest(model="m1", messages=history, max_tokens=50, tools=[CALC]))
    assert "error" in failed.text() and "division by zero" in failed.text()


async def test_demo_brain_quotes_the_prompt_without_the_calculator() -> None:
    answer = await DemoModel().generate(req("What is 2 + 2?"))
    assert answer.tool_uses() == [] and '"What is 2 + 2?"' in answer.text()
    assert answer.model == "loopwire-demo", "the demo model names itself, not the model asked for"


# -- error classifier -------------------------------------------------------------------------
def status_error(status: int, err_type: str = "api_error", message: str = "boom",
                 headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    request = httpx2.Request("POST", "http://fake/v1/messages")
    body = {"type": "error", "error": {"type": err_type, "message": message}}
    response = httpx2.Response(status, request=request, json=body, headers=headers or {})
    from anthropic._error_classes import make_status_error

    return make_status_error(f"Error code: {status}", body=body, response=response)


@pytest.mark.parametrize(("status", "err_type", "message", "code", "retryable"), [
    (429, "rate_limit_error", "slow down", "rate_limited", True),
    (529, "overloaded_error", "Overloaded", "model_overloaded", True),
    (500, "api_error", "oops", "server_error", True),
    (503, "api_error", "unavailable", "server_error", True),
    (408, "timeout_error", "late", "timeout", True),
    (400, "invalid_request_error", "messages: field required", "bad_request", False),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context_too_long", False),
    (401, "authentication_error", "invalid x-api-key", "auth", False),
    (403, "permission_error", "no", "auth", False),
    (404, "not_found_error", "model: claude-nope", "not_found", False),
    (200, "overloaded_error", "Overloaded", "model_overloaded", True),  # an error event in a stream
])
def test_classify_status_errors(status: int, err_type: str, message: str, code: str, retryable: bool) -> None:
    err = classify(status_error(status, err_type, message), "claude-x")
    assert (err.code, err.retryable, err.model) == (code, retryable, "claude-x")
    assert err.message == message
    step = err.to_step_error()
    assert step.code == code and step.retryable is retryable and step.model == "claude-x"


def test_classify_transport_errors_and_retry_after() -> None:
    request = httpx2.Request("POST", "http://fake/v1/messages")
    assert classify(anthropic.APITimeoutError(request)).code == "timeout"
    conn = classify(anthropic.APIConnectionError(request=request))
    assert conn.code == "connection" and conn.retryable
    assert classify(httpx2.ReadError("reset", request=request)).retryable
    bug = classify(KeyError("x"))
    assert bug.code == "internal" and not bug.retryable
    limited = classify(status_error(429, "rate_limit_error", headers={"retry-after": "3"}))
    assert limited.retry_after_s == 3.0 and limited.status == 429


# -- fallback chain ---------------------------------------------------------------------------
class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def overloaded() -> ModelCallError:
    return ModelCallError("model_overloaded", "Overloaded", True, 529)


def chain(models: dict[str, Model], policy: RetryPolicy | None = None, **kw: object) -> tuple[FallbackModel, Sleeps]:
    sleeps = Sleeps()
    runner = FallbackModel(list(models), models.__getitem__, policy or RetryPolicy(2, 0.1, 1.0),
                           sleep=sleeps, rng=random.Random(7), **kw)  # type: ignore[arg-type]
    return runner, sleeps


def test_retry_policy_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(max_retries=5, base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(1)
    for retry, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delay = policy.delay(retry, rng=rng)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(0, retry_after_s=3.0, rng=rng) == 3.0
    assert policy.delay(0, retry_after_s=60.0, rng=rng) == 4.0


async def test_fallback_retries_then_succeeds_on_the_same_model() -> None:
    primary = ScriptedModel([overloaded(), overloaded(), {"text": "finally"}])
    runner, sleeps = chain({"p": primary, "f": ScriptedModel()})
    result = await runner.run(req())
    assert result.response.text() == "finally" and result.response.model == "p"
    assert result.fallbacks == [] and result.attempts == 3
    assert len(sleeps.delays) == 2 and sleeps.delays[0] < sleeps.delays[1] * 2


async def test_fallback_switches_after_retries_are_exhausted() -> None:
    primary = ScriptedModel([overloaded()] * 3)
    fallback = ScriptedModel([{"text": "from the fallback"}])
    runner, sleeps = chain({"p": primary, "f": fallback})
    seen: list[dict[str, str]] = []

    async def on_switch(switch: dict[str, str]) -> None:
        seen.append(switch)

    started: list[str] = []

    async def on_start(model: str) -> None:  # the llm service's `generating` event
        started.append(model)

    result = await runner.run(req(), on_switch=on_switch, on_start=on_start)
    assert result.response.text() == "from the fallback" and result.response.model == "f"
    assert result.fallbacks == seen == [{"from_model": "p", "to_model": "f", "reason": "model_overloaded: Overloaded"}]
    assert started == ["p", "f"], "once per model, not per retry"
    assert result.attempts == 4 and len(sleeps.delays) == 2  # no sleep before switching
    assert [r.model for r in fallback.requests] == ["f"]
    primary.assert_done()


async def test_non_retryable_error_stops_at_once() -> None:
    primary = ScriptedModel([ModelCallError("bad_request", "messages: required", False, 400)])
    fallback = ScriptedModel()  # any call would raise ScriptExhausted
    runner, sleeps = chain({"p": primary, "f": fallback})
    with pytest.raises(ModelCallError) as info:
        await runner.run(req())
    assert info.value.code == "bad_request" and info.value.fallbacks == []
    assert fallback.requests == [] and sleeps.delays == []


async def test_all_models_failing_raise_the_last_error_with_the_switches() -> None:
    runner, _ = chain({"p": ScriptedModel([overloaded()] * 3),
                       "f": ScriptedModel([ModelCallError("rate_limited", "slow", True, 429)] * 3)})
    with pytest.raises(ModelCallError) as info:
        await runner.run(req())
    assert info.value.code == "rate_limited" and info.value.model == "f"
    assert [(s["from_model"], s["to_model"]) for s in info.value.fallbacks] == [("p", "f")]


async def test_breaker_gate_skips_a_model_and_hears_outcomes() -> None:
    class Gate(NoBreaker):
        def __init__(self) -> None:
            self.log: list[tuple[str, str]] = []

        def allow(self, model: str) -> bool:
            return model != "p"

        def record_success(self, model: str) -> None:
            self.log.append(("ok", model))

        def record_failure(self, model: str) -> None:
            self.log.append(("fail", model))

    gate = Gate()
    primary = ScriptedModel()
    runner, _ = chain({"p": primary, "f": ScriptedModel([overloaded(), {"text": "ok"}])}, breaker=gate)
    result = await runner.run(req())
    assert primary.requests == []
    assert result.fallbacks[0]["reason"].startswith("circuit_open")
    assert gate.log == [("fail", "f"), ("ok", "f")]


async def test_discard_after_streamed_text_and_callback_errors_pass_through() -> None:
    class Streams(Model):
        calls = 0

        async def generate(self, request, on_text=None):  # type: ignore[no-untyped-def]
            Streams.calls += 1
            assert on_text is not None
            await on_text("partial ")
            if Streams.calls == 1:
                raise overloaded()
            return await ScriptedModel([{"text": "whole"}]).generate(request, on_text)

    runner, _ = chain({"p": Streams()})
    discarded: list[tuple[str, str]] = []
    sink = Collect()

    async def on_discard(model: str, reason: str) -> None:
        discarded.append((model, reason))

    result = await runner.run(req(), sink, on_discard=on_discard)
    assert result.response.text() == "whole"
    assert discarded == [("p", "model_overloaded: Overloaded")]
    assert sink.pieces == ["partial ", "partial ", "whole"]

    async def broken_sink(piece: str) -> None:
        raise ConnectionError("nats down")

    runner, sleeps = chain({"p": ScriptedModel([{"text": "a b c d e f"}])})
    with pytest.raises(ConnectionError):
        await runner.run(req(), broken_sink)
    assert sleeps.delays == []


# -- providers --------------------------------------------------------------------------------
def test_provider_selection_from_the_environment() -> None:
    auto = Settings(llm_provider="auto")
    assert resolve_provider(auto, {}) == "scripted"
    assert resolve_provider(auto, {"ANTHROPIC_API_KEY": "sk-x"}) == "anthropic"
    assert resolve_provider(auto, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}) == "anthropic"
    assert resolve_provider(Settings(llm_provider="scripted"), {"ANTHROPIC_API_KEY": "sk"}) == "scripted"
    assert resolve_provider(Settings(llm_provider="anthropic"), {}) == "anthropic"
    with pytest.raises(ValueError, match="LOOPWIRE_LLM_PROVIDER"):
        resolve_provider(Settings(llm_provider="openai"), {})
    assert provider_description(auto, {}) == "scripted offline model (no ANTHROPIC_API_KEY)"
    assert provider_description(auto, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}).startswith(
        "Anthropic API at http://127.0.0.1:9")
    assert provider_description(auto, {"ANTHROPIC_API_KEY": "k"}) == \
        "Anthropic API at https://api.anthropic.com (API key set)"


async def test_model_factories() -> None:
    scripted = build_model_factory(Settings(), {})
    assert isinstance(scripted("a"), DemoModel) and scripted("a") is scripted("a")
    remote = build_model_factory(Settings(llm_timeout_s=5), {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    model = remote("claude-a")
    assert model is remote("claude-b"), "one client (one connection pool) for every model id"
    assert model.base_url.startswith("http://127.0.0.1:9")  # type: ignore[attr-defined]
    client = model._client  # type: ignore[attr-defined]
    assert client.api_key == "loopwire-local-no-key" and client.max_retries == 0 and client.timeout == 5
    await remote.aclose()


# -- envelope translation ---------------------------------------------------------------------
def test_generation_envelopes() -> None:
    env = Generate(session_id="s1", run_id="r1", step_id="r1:3:g0", turn=3, trace={"traceparent": "00-x"},
                   models=["a", "b", "a"], system="sys", messages=[{"role": "user", "content": "hi"}],
                   tools=[CALC], max_tokens=64, temperature=0.3)
    assert model_chain(env, "d") == ["a", "b"]
    assert model_chain(env.model_copy(update={"models": []}), "d") == ["d"]
    request = model_request(env, "d")
    assert (request.model, request.system, request.max_tokens, request.temperature) == ("a", "sys", 64, 0.3)
    assert request.tools == [CALC]
    assert record_key(env.step_id) == "gen:r1:3:g0"

    response = ModelResponse(message={"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
                             stop_reason="end_turn", model="b", usage=Usage(input_tokens=5, output_tokens=1))
    switch = {"from_model": "a", "to_model": "b", "reason": "model_overloaded: Overloaded"}
    ok = result_ok(env, FallbackResult(response, [switch], 4))
    assert ok.ok and ok.message == response.message and ok.model == "b" and ok.stop_reason == "end_turn"
    assert ok.usage.input_tokens == 5 and ok.fallbacks == [switch] and ok.step_id == "r1:3:g0"

    err = ModelCallError("model_overloaded", "Overloaded", True, 529, "b")
    err.fallbacks = [{"from_model": "a", "to_model": "b", "reason": "x"}]
    failed = result_failed(env, err)
    assert not failed.ok and failed.error is not None and failed.error.code == "model_overloaded"
    assert (failed.session_id, failed.run_id, failed.step_id, failed.turn, failed.trace) == \
        ("s1", "r1", "r1:3:g0", 3, {"traceparent": "00-x"})
    assert failed.fallbacks == err.fallbacks


# -- observation ------------------------------------------------------------------------------
async def test_each_attempt_gets_a_chat_span_in_the_runs_trace(spans: InMemorySpanExporter) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    env = Generate(session_id="s1", run_id="r1", step_id="r1:1:g0", models=["p", "f"], max_tokens=10,
                   messages=[{"role": "user", "content": "hi"}],
                   trace={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"})
    primary = ScriptedModel([overloaded()])
    fallback = ScriptedModel([{"text": "an answer in words", "usage": {"input_tokens": 9, "output_tokens": 4}}])
    models = {"p": primary, "f": fallback}
    duration = 'loopwire_llm_request_duration_seconds_count'
    before = metrics.REGISTRY.get_sample_value(duration, {"model": "f"}) or 0.0
    runner = FallbackModel(["p", "f"], lambda m: ObservedModel(models[m], env), RetryPolicy(max_retries=0),
                           sleep=Sleeps())
    result = await runner.run(model_request(env, "p"), Collect())
    assert result.response.model == "f"

    failed, ok = spans.get_finished_spans()
    assert (failed.name, ok.name) == ("chat p", "chat f")
    assert {format(s.context.trace_id, "032x") for s in (failed, ok)} == {trace_id}
    assert failed.status.status_code.name == "ERROR"
    attrs = dict(ok.attributes or {})
    assert attrs["gen_ai.request.model"] == "f" and attrs["gen_ai.conversation.id"] == "s1"
    assert attrs["gen_ai.usage.input_tokens"] == 9 and attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert metrics.REGISTRY.get_sample_value(duration, {"model": "f"}) == before + 1
