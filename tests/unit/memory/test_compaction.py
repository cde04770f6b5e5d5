"""Compaction boundaries: tool pairs are never split, the first request and the latest
turns are kept, the compacted request keeps the Messages API's rules."""

from __future__ import annotations

import pytest

from loopwire.memory import compaction as c
from tests.memory_helpers import agentic, assert_valid_request, conversation, text, tool_turn

pytestmark = pytest.mark.unit


def test_boundaries_sit_on_assistant_messages_before_the_latest_turns() -> None:
    history = conversation(turns=5)  # u a u a u a u a u a u
    rest = history[1:]
    assert c.boundary_candidates(rest, keep_turns=2) == [2, 4, 6]
    # keep_turns=2: the tail must hold the last two assistant messages (rest[6], rest[8]).
    assert max(c.boundary_candidates(rest, keep_turns=2)) == 6
    assert max(c.boundary_candidates(rest, keep_turns=1)) == 8
    assert c.boundary_candidates(rest, keep_turns=6) == [], "fewer turns than kept: nothing to summarise"


def test_a_tool_use_is_never_separated_from_its_result() -> None:
    rest = [*tool_turn(1), *tool_turn(2), text("assistant", "done"), text("user", "next")]
    candidates = c.boundary_candidates(rest, keep_turns=1)
    # rest = a(tool) u(result) a(tool) u(result) a u: cuts at 2 and 4 only, never at 1 or 3.
    assert candidates == [2, 4]
    # A result that arrives two messages after its use (an odd but possible history):
    odd = [text("assistant", "x"), {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t9", "name": "add", "input": {}}]}, text("assistant", "still thinking"),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "1"}]},
        text("assistant", "y"), text("user", "z")]
    assert 2 not in c.boundary_candidates(odd, keep_turns=1)
    assert 2 in c.unsafe_boundaries(odd) and 3 in c.unsafe_boundaries(odd)


def test_a_result_whose_use_was_summarised_before_is_summarised_too() -> None:
    orphan = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gone", "content": "1"}]}
    rest = [text("assistant", "a"), orphan, text("assistant", "b"), text("user", "c"), text("assistant", "d"),
            text("user", "e")]
    assert c.boundary_candidates(rest, keep_turns=1) == [2, 4]


def test_choose_boundary_keeps_as_much_as_fits_the_budget() -> None:
    rest = conversation(turns=6)[1:]
    tokens = [10] * len(rest)
    # Tail budget 40 tokens: the earliest cut whose tail is <= 40 (4 messages).
    j = c.choose_boundary(rest, tokens, budget=40, keep_turns=1)
    assert j is not None and sum(tokens[j:]) <= 40 and rest[j]["role"] == "assistant"
    # Nothing fits: summarise as much as allowed, the latest turn stays.
    assert c.choose_boundary(rest, tokens, budget=0, keep_turns=1) == len(rest) - 2
    assert c.choose_boundary(rest[:1], tokens[:1], budget=0, keep_turns=1) is None


def test_the_compacted_request_keeps_the_first_request_and_the_tail_verbatim() -> None:
    history = conversation(turns=6)
    covers = 7  # history[7] is an assistant message
    assert history[covers]["role"] == "assistant"
    messages = c.assemble(history[0], "the user gave the code ALPHA-7", covers, tail=history[covers:])
    assert_valid_request(messages)
    first = messages[0]["content"]
    assert first[0] == history[0]["content"][0], "the first request is intact"
    assert "<conversation-summary>" in first[1]["text"] and "ALPHA-7" in first[1]["text"]
    assert "6 messages" in first[1]["text"]
    assert messages[1:] == history[covers:], "the latest turns are verbatim"


def test_the_drop_note_says_what_was_left_out() -> None:
    history = conversation(turns=4)
    messages = c.assemble(history[0], None, 1, tail=history[5:], dropped=4)
    assert_valid_request(messages)
    assert "4 earlier messages were left out" in messages[0]["content"][-1]["text"]


@pytest.mark.parametrize("seed", range(30))
def test_every_candidate_cut_of_a_random_tool_run_is_a_valid_request(seed: int) -> None:
    history = agentic(steps=25, seed=seed)
    rest = history[1:]
    for j in c.boundary_candidates(rest, keep_turns=1):
        assert_valid_request(c.assemble(history[0], "summary", 1 + j, tail=rest[j:]))


def test_the_summariser_reads_plain_text_with_big_blocks_cut() -> None:
    big = "x" * 50_000
    span = [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "fetch", "input": {"u": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big,
                                          "is_error": True}]}]
    rendered = c.render_transcript(span)
    assert "[called tool fetch with" in rendered and "[tool result (error):" in rendered
    assert len(rendered) < 6000 and "characters left out" in rendered
    request = c.summary_request("earlier facts", span, max_tokens=500)
    body = request[0]["content"][0]["text"]
    assert body.startswith("<previous-summary>\nearlier facts") and "<conversation>" in body


def test_chunks_respect_the_budget_and_keep_order() -> None:
    span = conversation(turns=10)
    tokens = [30] * len(span)
    chunks = c.chunk_span(span, tokens, budget=100)
    assert [m for chunk in chunks for m in chunk] == span
    assert all(len(chunk) * 30 <= 100 for chunk in chunks)
    assert c.chunk_span(span[:1], [500], budget=100) == [span[:1]], "an oversized message is its own chunk"


def test_fingerprint_changes_with_what_it_covers() -> None:
    history = conversation(turns=3)
    fp = c.fingerprint(history[0], history[2], 3)
    assert fp == c.fingerprint(history[0], history[2], 3)
    assert fp != c.fingerprint(history[0], history[4], 3)
    assert fp != c.fingerprint(history[0], history[2], 5)
