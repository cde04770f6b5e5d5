"""The history memo (services/memory/history_memo.py): messages decoded once by their stored
bytes, and what the assembly makes of them (normalised forms, the tally) the same as made
from scratch, within its bound and without it."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.assembly import normalise_messages
from loopwire.memory.compaction import assemble
from loopwire.memory.history_memo import ENTRY_COST, HistoryMemo
from loopwire.memory.tokens import Estimator
from loopwire.shared.contract import codec
from loopwire.shared.stores.session_store import PipelinedHistory
from tests.memory_helpers import agentic, conversation

pytestmark = pytest.mark.unit

ODD: list[dict[str, Any]] = [
    {"role": "user", "content": "a string content"},
    {"role": "user", "content": [{"type": "text", "text": "a follow-up, merged with it"}]},
    {"role": "assistant", "content": []},  # dropped
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"}]},
    {"role": "user", "content": None},
    {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
]


def stored(messages: list[dict[str, Any]]) -> list[bytes]:
    """The reply of a history read: each message as the session store writes it."""
    return [codec.dumps(m) for m in messages]


@pytest.mark.parametrize("history", [conversation(5), agentic(12, 4, 300), ODD], ids=["chat", "tool run", "odd"])
def test_what_the_memo_gives_is_what_a_fresh_decode_gives(history: list[dict[str, Any]]) -> None:
    estimator = Estimator()
    memo = HistoryMemo(estimator, 1 << 20)
    for upto in range(1, len(history) + 1):  # the history growing, read again and again
        reply = stored(history[:upto])
        decoded = memo.decode(reply)
        assert decoded == PipelinedHistory.messages(reply)
        fresh = normalise_messages(PipelinedHistory.messages(reply))
        assert normalise_messages(decoded, memo) == fresh
        messages = assemble(decoded[0], None, 1, tail=decoded[1:], memo=memo)
        assert messages == assemble(history[0], None, 1, tail=history[1:upto])
        assert estimator.tally("sys", messages, [], known=memo.terms) == estimator.tally("sys", messages, [])
        with_summary = assemble(decoded[0], "a summary", 3, tail=decoded[1:], dropped=2, memo=memo)
        assert with_summary == assemble(history[0], "a summary", 3, tail=history[1:upto], dropped=2)
    assert len(memo) == len(set(stored(history)))


def test_a_message_is_decoded_once_and_handed_out_again() -> None:
    memo = HistoryMemo(Estimator(), 1 << 20)
    history = agentic(6, 1)
    first = memo.decode(stored(history))
    again = memo.decode(stored(history + conversation(1)[1:]))
    assert all(a is b for a, b in zip(first, again, strict=False))
    assert again[len(history)] == conversation(1)[1]
    # Its normalised form is made once as well, and is what an unmerged message becomes.
    assert normalise_messages(again, memo)[1] is normalise_messages(first, memo)[1]


def test_the_memo_keeps_within_its_bytes_and_forgets_the_least_recently_read() -> None:
    history = conversation(30, words=50)
    sizes = [ENTRY_COST + 2 * len(raw) for raw in stored(history)]  # what each entry is taken to hold
    memo = HistoryMemo(Estimator(), sum(sizes[:10]))
    memo.decode(stored(history[:10]))
    assert len(memo) == 10
    memo.decode(stored(history[:1]))  # the first read again: the most recent now
    memo.decode(stored(history[10:12]))
    assert len(memo) <= 10 and memo.held_bytes <= sum(sizes[:10])
    kept = memo.decode(stored(history[:1]))[0]
    assert memo.normal(kept) is not None  # kept: read most recently before the new ones
    forgotten = PipelinedHistory.messages(stored(history[1:2]))[0]
    assert memo.normal(forgotten) is None  # not an object the memo handed out
    # Forgotten entries are made again, the same as ever.
    assert normalise_messages(memo.decode(stored(history)), memo) == normalise_messages(history)
    assert memo.held_bytes <= sum(sizes[:10])


def test_without_bytes_the_memo_keeps_nothing() -> None:
    memo = HistoryMemo(Estimator(), 0)
    history = conversation(3)
    decoded = memo.decode(stored(history))
    assert decoded == history and len(memo) == 0 and memo.normal(decoded[0]) is None
    assert normalise_messages(decoded, memo) == normalise_messages(history)
