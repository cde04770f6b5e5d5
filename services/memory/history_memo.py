"""The history messages a memory service has decoded, by their stored bytes, with what each
generation would otherwise work out again from them: the message's normalised form and its
tally's terms.

Every generation reads the session's whole history (or all of it after the compaction's
boundary): each message decoded, normalised (assembly.normalise_messages) and tallied for
the estimate (tokens.Estimator), a cost that grew with the conversation. A stored message
never changes, and the same bytes always decode to the same message, so the memo keys on
the bytes themselves: no invalidation, no trust in the session's id or length (a session
deleted and started again, a commit that trimmed the history, a fork, all read other bytes
or the same ones, never a stale entry). Only the messages of the current generation are
new; the rest are found.

What it hands out is shared between generations, and treated as read-only everywhere
(normalising and assembling make new lists and dicts; nothing writes into a message or a
block). The entries are found again by the identity of the objects handed out: an entry
holds its objects, so an identity matched while the entry is here is that object.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from loopwire.shared.contract.messages import Message
from loopwire.shared.stores.session_store import PipelinedHistory

from .assembly import normalised_one
from .tokens import Estimator, Terms

__all__ = ["ENTRY_COST", "HistoryMemo", "Remembered"]

ENTRY_COST = 1024
"""The memory an entry takes beyond its strings, about: the message's dicts and lists,
the entry and its three table slots (a tool_use or tool_result message of ~110 stored
bytes took ~1.3 KB in all, measured with tracemalloc)."""


@dataclass(frozen=True, slots=True)
class Remembered:
    message: Message
    """As stored, decoded."""
    normal: Message | None
    """Its normalised form on its own (None: it has no content, normalising drops it)."""
    terms: Terms
    """The tally's terms of `normal`'s content blocks."""
    size: int
    """What it holds in memory, about: `ENTRY_COST` and twice its stored bytes (the bytes,
    and the decoded strings)."""


class HistoryMemo:
    """Decoded messages by their stored bytes, taking about `max_bytes` of memory at most
    (least recently read out first); `max_bytes` 0 keeps none (every read decodes, as
    without a memo)."""

    def __init__(self, estimator: Estimator, max_bytes: int) -> None:
        self._estimator = estimator
        self._max_bytes = max_bytes
        self._by_bytes: OrderedDict[bytes, Remembered] = OrderedDict()
        self._by_object: dict[int, Remembered] = {}
        """id(message) and id(normal) of each entry."""
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._by_bytes)

    @property
    def held_bytes(self) -> int:
        """About the memory its entries take (`Remembered.size`)."""
        return self._bytes

    def decode(self, reply: list[bytes]) -> list[Message]:
        """The messages of one history read's reply (`PipelinedHistory.messages`), those
        decoded before handed out again."""
        if not self._max_bytes:
            return PipelinedHistory.messages(reply)
        found = self._by_bytes
        out = []
        for raw in reply:
            entry = found.get(raw)
            if entry is None:
                entry = self._remember(raw)
            else:
                found.move_to_end(raw)
            out.append(entry.message)
        return out

    def normal(self, message: Message) -> Remembered | None:
        """The entry of a message this memo handed out (None for any other)."""
        entry = self._by_object.get(id(message))
        return entry if entry is not None and entry.message is message else None

    def terms(self, normal: Message) -> Terms | None:
        """The terms of a normalised message this memo made (None for any other, e.g. one
        merged from two)."""
        entry = self._by_object.get(id(normal))
        return entry.terms if entry is not None and entry.normal is normal else None

    def _remember(self, raw: bytes) -> Remembered:
        message = PipelinedHistory.messages([raw])[0]
        content = message.get("content")
        if type(content) is list and content and len(message) == 2 and "role" in message:
            normal: Message | None = message  # already its normalised form: not made twice
        else:
            normal = normalised_one(message)
        terms = self._estimator.content_terms(normal["content"]) if normal is not None else (0, 0, 0.0, 0)
        entry = Remembered(message, normal, terms, ENTRY_COST + 2 * len(raw))
        self._by_bytes[raw] = entry
        self._by_object[id(message)] = entry
        if normal is not None and normal is not message:
            self._by_object[id(normal)] = entry
        self._bytes += entry.size
        while self._bytes > self._max_bytes and self._by_bytes:
            _, old = self._by_bytes.popitem(last=False)
            self._forget(old)
        return entry

    def _forget(self, entry: Remembered) -> None:
        self._bytes -= entry.size
        self._by_object.pop(id(entry.message), None)
        if entry.normal is not None and entry.normal is not entry.message:
            self._by_object.pop(id(entry.normal), None)
