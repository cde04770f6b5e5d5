"""Token counting: count_tokens of the local Messages API server through the official SDK
(the llm service's counter, services/llm/token_count.py), the cache by content hash (in process and in Redis), the fallback when the endpoint does
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

import orjson
import pytest

from loopwire.llm.token_count import token_count_from_settings
from loopwire.memory.tokens import Count, Estimator, Tally, TokenCounter, build_token_counter
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import CountTokens, TokenCount, ToolSpec
from loopwire.shared.stores.blobs import REF_KEY, messages_have_refs
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


@pytest.mark.unit
async def test_the_llm_services_counter_follows_its_provider() -> None:
    assert token_count_from_settings(Settings(), environ={}).client is None, "no Anthropic configured: estimate"
    counter = token_count_from_settings(Settings(), environ={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"})
    assert counter.client is not None
    await counter.aclose()
    assert token_count_from_settings(Settings(memory_token_counting="estimate"),
                                     environ={"ANTHROPIC_API_KEY": "k"}).client is None
    answer = await token_count_from_settings(Settings(), environ={}).count(CountTokens(model="m", messages=[]))
    assert answer.input_tokens is None and answer.status is None and answer.error
    with pytest.raises(ValueError, match="auto, api or estimate"):
        Settings(memory_token_counting="magic")


@pytest.mark.unit
async def test_the_memory_counter_asks_unless_told_to_estimate() -> None:
    asked: list[CountTokens] = []

    async def exact(request: CountTokens) -> TokenCount:
        asked.append(request)
        return TokenCount(input_tokens=42)

    counter = build_token_counter(Settings(), exact)
    assert (await counter.count("m", "sys", conversation(1), tools=[ADD])) == Count(42, exact=True)
    assert asked[0].model == "m" and asked[0].system == "sys" and asked[0].tools == [ADD]
    assert build_token_counter(Settings(memory_token_counting="estimate"), exact).exact is None


@pytest.mark.unit
@pytest.mark.parametrize(("answer", "paused"), [
    (TokenCount(status=400, error="BadRequestError"), False),  # this request only: ask again next time
    (TokenCount(status=529, error="OverloadedError"), True),
    (TokenCount(error="no count_tokens endpoint is configured"), True),
    (None, True),  # no llm service answered
])
async def test_an_answer_without_a_count_falls_back_to_the_estimate(answer: TokenCount | None, paused: bool) -> None:
    async def exact(request: CountTokens) -> TokenCount:
        if answer is None:
            raise TimeoutError
        return answer

    counter = TokenCounter(exact=exact)
    messages = conversation(2)
    got = await counter.count("m", None, messages, tools=[])
    assert got == Count(counter.estimate(None, messages, []), exact=False)
    assert counter.reachable is not paused




def _ref(text: str, size: int) -> dict[str, Any]:
    return {"type": "text", "text": text, REF_KEY: {"sha256": "ab" * 32, "bytes": size}}


@pytest.mark.parametrize("messages", [
    conversation(3),
    conversation(2) + [{"role": "user", "content": [_ref("a preview", 90_000)]}],
    conversation(2) + [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "seen"}, _ref("a preview", 70_000)]}]}],
    conversation(2) + [{"role": "user", "content": [{"type": "text", "text": "hi", REF_KEY: "not a reference"}]}],
], ids=["no refs", "a ref block", "a ref inside a tool result", "a damaged ref"])
async def test_the_tally_finds_the_references_the_exact_count_looks_for(messages: list[dict[str, Any]]) -> None:
    """A caller's tally stands in for the count's own passes: the same references found,
    the same count given, without an endpoint and with one."""
    estimator = Estimator()
    tally = estimator.tally(None, messages, [])
    assert (tally.refs > 0) == messages_have_refs(messages)

    offline = TokenCounter(exact=None)
    assert await offline.count("m", None, messages, tools=[], tally=tally) == await offline.count("m", None, messages, tools=[])

    asked: list[int] = []

    async def exact(request: CountTokens) -> TokenCount:
        asked.append(len(request.messages))
        return TokenCount(input_tokens=1234)

    online = TokenCounter(exact=exact)
    with_tally = await online.count("m", None, messages, tools=[], tally=tally)
    online_again = TokenCounter(exact=exact)
    assert with_tally == await online_again.count("m", None, messages, tools=[])
    assert asked[0] == asked[1]  # the same messages reached the endpoint


def _summed(estimator: Estimator, system: str | None, messages: list[dict[str, Any]],
            tools: list[ToolSpec]) -> tuple[float, float, float, float, int]:
    """The tally as its definition reads: one tally per message, system prompt and tool, added up."""
    parts = [estimator.message_tally(m) for m in messages]
    parts += [Tally(chars=len(system), blocks=1)] if system else []
    parts += [Tally(chars=len(t.name) + len(t.description) + len(orjson.dumps(t.input_schema)), blocks=1) for t in tools]
    return (sum(p.chars for p in parts), sum(p.messages for p in parts), sum(p.blocks for p in parts),
            sum(p.fixed for p in parts), sum(p.refs for p in parts))


def test_the_tally_adds_up_every_kind_of_block() -> None:
    estimator = Estimator()
    blocks: list[Any] = [
        "a bare string", 7, {"type": "text", "text": "hello"}, _ref("preview", 5000), _ref("a long preview" * 10, 3),
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "x"}, _ref("p", 900)]},
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": {"odd": True}},
        {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
        {"type": "document", "source": {"type": "text", "data": "some text"}},
        {"type": "document", "source": {"type": "base64", "data": "JVBER"}},
        {"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "server_tool_use", "id": "s1"},
    ]
    # By hand, block by block: 13 + 1 (the JSON of 7) + 5 + 5000 (a reference's size, above its
    # preview) + 140 (its preview, above its size) + 7+3+13 (id, name, input JSON) + 7+1 +
    # 7+1+900 (ids, the inner text, the inner reference) + 7+12 + 0 (an image) + 9 + 0 (a PDF)
    # + 3 + 36 (the JSON of an unknown block) characters; 14 blocks and the 2 inside a result;
    # an image and a document at their fixed costs; 3 references.
    assert estimator.message_tally({"role": "user", "content": blocks}) == Tally(
        chars=6165, messages=1, blocks=16, fixed=3600.0, refs=3)
    messages = [{"role": "user", "content": "a string message"}, {"role": "assistant", "content": []},
                {"role": "user", "content": None}, {"role": "user", "content": blocks},
                *agentic(6, 3, 120), {"role": "assistant", "content": blocks[::-1]}]
    for case in [(None, messages, []), ("You are terse.", messages, [ADD]), (None, [], [ADD]), *corpus()]:
        tally = estimator.tally(*case)
        assert (tally.chars, tally.messages, tally.blocks, tally.fixed, tally.refs) == _summed(estimator, *case)
