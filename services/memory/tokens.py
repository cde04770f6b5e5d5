"""How many tokens a request holds: Anthropic's count, or a calibrated estimate.

`TokenCounter.count()` asks the llm service for the exact count (the Messages API's
`count_tokens` endpoint behind it, services/llm/token_count.py; exact_count.py is the way
there) and caches the answer by a hash of the request's content, in process (LRU) and
optionally in Redis (keys.token_count), so a redelivered step or a request counted twice
costs one call. When the endpoint is not configured or does not answer, the counter
falls back to `Estimator`, and after a failure to answer it stops asking for a while
instead of paying a timeout on every generation.

`Estimator` is a character count with per-message and per-block costs, scaled by one
factor that each exact count nudges (an exponential moving average of exact/raw): the
estimate starts from Anthropic's rule of thumb (~3.5 characters per token) and converges
on whatever tokenizer answers count_tokens (tests/unit/memory/test_tokens.py measures its error).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import CountTokens, TokenCount, ToolSpec
from loopwire.shared.contract.messages import ContentBlock, Message, is_block
from loopwire.shared.runtime.lru import LruCache
from loopwire.shared.stores.blobs import REF_KEY, messages_have_refs

if TYPE_CHECKING:
    from .settings import MemorySettings

log = logging.getLogger("loopwire.memory.tokens")

UNREACHABLE_PAUSE_S = 60.0
"""After the endpoint failed to answer (connection, 404, 5xx, no llm service), use the
estimate this long."""

ExactCount = Callable[[CountTokens], Awaitable[TokenCount]]
"""Asks for the exact count of a request (exact_count.py: the llm service)."""

Terms = tuple[int, int, float, int]
"""(chars, blocks, fixed, refs) of some content blocks: a `Tally` without its messages."""

KnownTerms = Callable[[Message], "Terms | None"]
"""The terms of a message's content worked out before (history_memo.py), or None."""


def _chars(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    return len(orjson.dumps(value))


@dataclass
class Tally:
    """What a request is made of, for the estimate: characters of content, messages and
    blocks (each with a framing cost), and fixed costs (images, documents)."""

    chars: float = 0.0
    messages: float = 0.0
    blocks: float = 0.0
    fixed: float = 0.0
    refs: int = 0
    """Blocks of content by reference (shared/stores/blobs.py) among them: the tally's pass
    over the blocks answers `messages_have_refs` for the exact count as well."""

    def add(self, other: Tally) -> None:
        self.chars += other.chars
        self.messages += other.messages
        self.blocks += other.blocks
        self.fixed += other.fixed
        self.refs += other.refs


@dataclass
class Estimator:
    """Tokens from a tally: `chars / chars_per_token + messages x per_message + blocks x
    per_block + fixed`, each of the first three terms scaled by a calibrated weight.

    The weights start at 1 (Anthropic's rule of thumb for text, a few tokens of framing
    per message and block) and are fitted to the exact counts seen so far: a least-squares
    fit of the three terms, pulled towards 1 (ridge) so a few samples cannot send it
    astray, with old samples fading out. Framing and text are weighted separately because
    one ratio cannot be right for both a chat of short lines and a run of long tool results.
    """

    chars_per_token: float = 3.5
    per_message: float = 4.0
    """Role and turn framing of one message."""
    per_block: float = 3.0
    """Framing of one content block (and of the system prompt and each tool definition)."""
    image_tokens: float = 1600.0
    """An image costs about (width x height) / 750 tokens, at most ~1600 after resizing."""
    document_tokens: float = 2000.0
    """A base64 document (PDF): its size says little about its text; a page-ish guess."""
    weights: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    ridge: float = 0.01
    """Pull towards the starting weights, relative to the samples' own scale."""
    decay: float = 0.95
    """Each new sample weighs 1/decay times the one before it."""
    samples: int = 0
    _xx: list[list[float]] = field(default_factory=lambda: [[0.0] * 3 for _ in range(3)], repr=False)
    _xy: list[float] = field(default_factory=lambda: [0.0] * 3, repr=False)

    # -- tallies -----------------------------------------------------------------------------
    def block_terms(self, block: Any) -> Terms:
        """(chars, blocks, fixed, refs) of one content block. Tuples rather than a `Tally`
        per block: the tally runs on every message of every generation, and a dataclass
        made and added per block was most of its cost."""
        if isinstance(block, str):
            return len(block), 1, 0.0, 0
        if not is_block(block):
            return _chars(block), 1, 0.0, 0
        ref = block.get(REF_KEY)
        if isinstance(ref, dict):  # large content by reference: the model gets all of it
            return max(int(ref.get("bytes", 0)), len(block.get("text", ""))), 1, 0.0, 1
        if REF_KEY in block:
            # Not a reference the blob store made (a damaged history): counted as the block
            # it is, and still a reference to `messages_have_refs`, whose resolution fails.
            chars, blocks, fixed, _ = self._kind_terms(block)
            return chars, blocks, fixed, 1
        return self._kind_terms(block)

    def _kind_terms(self, block: ContentBlock) -> Terms:
        kind = block.get("type")
        if kind == "text":
            return len(block.get("text", "")), 1, 0.0, 0
        if kind == "tool_use":
            return len(block.get("id", "")) + len(block.get("name", "")) + _chars(block.get("input", {})), 1, 0.0, 0
        if kind == "tool_result":
            content = block.get("content", "")
            ids = len(block.get("tool_use_id", ""))
            if isinstance(content, list):
                chars, blocks, fixed, refs = self.content_terms(content)
                return ids + chars, blocks + 1, fixed, refs
            return ids + _chars(content), 1, 0.0, 0
        if kind == "image":
            return 0, 1, self.image_tokens, 0
        if kind == "document":
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                return len(source.get("data", "")), 1, 0.0, 0
            return 0, 1, self.document_tokens, 0
        if kind == "thinking":
            return len(block.get("thinking", "")), 1, 0.0, 0
        return _chars(block), 1, 0.0, 0

    def block_tally(self, block: Any) -> Tally:
        chars, blocks, fixed, refs = self.block_terms(block)
        return Tally(chars=chars, blocks=blocks, fixed=fixed, refs=refs)

    def message_tally(self, message: Message) -> Tally:
        tally = Tally()
        self._add_messages(tally, [message])
        return tally

    def content_terms(self, content: Sequence[Any]) -> Terms:
        """The terms of a message's (or a tool result's) content blocks, added up."""
        chars = blocks = refs = 0
        fixed = 0.0
        terms = self.block_terms
        for block in content:
            c, b, f, r = terms(block)
            chars += c
            blocks += b
            fixed += f
            refs += r
        return chars, blocks, fixed, refs

    def _add_messages(self, tally: Tally, messages: list[Message], known: KnownTerms | None = None) -> None:
        chars = blocks = fixed = 0.0
        refs = 0
        for message in messages:
            found = known(message) if known is not None else None
            if found is None:
                content = message.get("content")
                found = (len(content), 1, 0.0, 0) if isinstance(content, str) else self.content_terms(content or ())
            c, b, f, r = found
            chars += c
            blocks += b
            fixed += f
            refs += r
        tally.chars += chars
        tally.messages += len(messages)
        tally.blocks += blocks
        tally.fixed += fixed
        tally.refs += refs

    def tally(self, system: str | None, messages: list[Message], tools: list[ToolSpec],
              *, known: KnownTerms | None = None) -> Tally:
        """`known`: the terms of some of `messages` worked out before (the same as their
        blocks' would add up to)."""
        total = Tally()
        self._add_messages(total, messages, known)
        if system:
            total.add(Tally(chars=len(system), blocks=1))
        for tool in tools:
            total.add(Tally(chars=len(tool.name) + len(tool.description) + _chars(tool.input_schema), blocks=1))
        return total

    def terms(self, tally: Tally) -> list[float]:
        """The three calibrated terms at weight 1."""
        return [tally.chars / self.chars_per_token, tally.messages * self.per_message, tally.blocks * self.per_block]

    def tokens(self, tally: Tally) -> float:
        return sum(w * t for w, t in zip(self.weights, self.terms(tally), strict=True)) + tally.fixed

    # -- estimates ----------------------------------------------------------------------------
    def estimate(self, system: str | None, messages: list[Message], tools: list[ToolSpec]) -> int:
        return self.estimate_of(self.tally(system, messages, tools))

    def estimate_of(self, tally: Tally) -> int:
        return max(1, math.ceil(self.tokens(tally)))

    def message_tokens(self, message: Message) -> int:
        return max(1, math.ceil(self.tokens(self.message_tally(message))))

    def text_tokens(self, text: str) -> int:
        return math.ceil(self.tokens(Tally(chars=len(text), blocks=1)))

    # -- calibration ----------------------------------------------------------------------------
    def calibrate(self, tally: Tally, exact: int) -> None:
        """Add one exact count and refit the weights."""
        y = exact - tally.fixed
        x = self.terms(tally)
        if y <= 0 or sum(x) <= 0:
            return
        for i in range(3):
            self._xy[i] = self._xy[i] * self.decay + x[i] * y
            for j in range(3):
                self._xx[i][j] = self._xx[i][j] * self.decay + x[i] * x[j]
        self.samples += 1
        # Ridge towards weights of 1, scaled per term (the terms differ by orders of magnitude).
        lam = [self.ridge * self._xx[i][i] for i in range(3)]
        a = [[self._xx[i][j] + (lam[i] if i == j else 0.0) for j in range(3)] for i in range(3)]
        b = [self._xy[i] + lam[i] for i in range(3)]
        solved = _solve3(a, b)
        if solved is not None:
            self.weights = [min(5.0, max(0.2, w)) for w in solved]


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting for one 3x3 system."""
    m = [row[:] + [rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for k in range(col, 4):
                m[r][k] -= f * m[col][k]
    out = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        out[r] = (m[r][3] - sum(m[r][k] * out[k] for k in range(r + 1, 3))) / m[r][r]
    return out


@dataclass
class Count:
    tokens: int
    exact: bool


def strip_refs(messages: list[Message]) -> tuple[list[Message], int]:
    """Messages with each reference block reduced to its preview text, and how many
    characters of content the references stand for beyond their previews."""
    hidden = 0

    def strip(block: Any) -> Any:
        nonlocal hidden
        if not isinstance(block, dict):
            return block
        ref = block.get(REF_KEY)
        if isinstance(ref, dict):
            text = block.get("text", "")
            hidden += max(0, int(ref.get("bytes", 0)) - len(text))
            return {"type": "text", "text": text}
        if REF_KEY in block:  # a damaged reference: the block without it
            return {k: v for k, v in block.items() if k != REF_KEY}
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [strip(b) for b in block["content"]]}
        return block

    out = []
    for message in messages:
        content = message.get("content")
        out.append({**message, "content": [strip(b) for b in content]} if isinstance(content, list) else message)
    return out, hidden


def content_hash(model: str, system: str | None, messages: list[Message], *, tools: list[ToolSpec]) -> str:
    payload = [model, system, messages, [t.model_dump() for t in tools]]
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


class TokenCounter:
    """Exact counts when the endpoint answers, calibrated estimates otherwise.

    `exact` asks for an exact count (None: estimates only); `redis` an optional
    redis.asyncio client for the shared cache."""

    def __init__(self, exact: ExactCount | None = None, estimator: Estimator | None = None, redis: Any = None,
                 *, cache_size: int = 4096, cache_ttl_s: int = 0) -> None:
        self.exact = exact
        self.estimator = estimator or Estimator()
        self.redis = redis
        self.cache_ttl_s = cache_ttl_s
        self._lru = LruCache[str, int](cache_size)
        self._down_until = 0.0
        self.calls = 0
        """count_tokens requests made (cache misses that reached the endpoint)."""

    @property
    def reachable(self) -> bool:
        return self.exact is not None and time.monotonic() >= self._down_until

    def estimate(self, system: str | None, messages: list[Message], tools: list[ToolSpec]) -> int:
        return self.estimator.estimate(system, messages, tools)

    async def count(self, model: str, system: str | None, messages: list[Message],
                    *, tools: list[ToolSpec], tally: Tally | None = None) -> Count:
        """The exact count where the endpoint answers, else the estimate (`tally`: the
        estimator's tally of these very messages, which the caller already made: neither
        it nor the search for references is made again)."""
        if tally.refs > 0 if tally is not None else messages_have_refs(messages):
            # Content by reference (shared/stores/blobs.py) reaches the model whole, but the API
            # would reject the reference: count the rest exactly, estimate what it hides.
            visible, hidden_chars = strip_refs(messages)
            counted = await self.count(model, system, visible, tools=tools)
            hidden = math.ceil(self.estimator.tokens(Tally(chars=hidden_chars)))
            return Count(counted.tokens + hidden, exact=False)
        if not self.reachable:
            return Count(self.estimator.estimate_of(tally) if tally is not None else self.estimate(system, messages, tools),
                         exact=False)
        key = content_hash(model, system, messages, tools=tools)
        cached = self._lru.get(key)
        if cached is None and self.redis is not None and self.cache_ttl_s:
            try:
                raw = await self.redis.get(keys.token_count(key))
                cached = int(raw) if raw is not None else None
            except Exception as exc:  # the cache is an optimisation, never a failure
                log.debug("token cache read failed: %s", exc)
        if cached is not None:
            self._lru.put(key, cached)
            return Count(cached, exact=True)
        exact = await self._ask(model, system, messages, tools=tools)
        if exact is None:
            return Count(self.estimate(system, messages, tools), exact=False)
        self.estimator.calibrate(self.estimator.tally(system, messages, tools), exact)
        self._lru.put(key, exact)
        if self.redis is not None and self.cache_ttl_s:
            try:
                await self.redis.set(keys.token_count(key), exact, ex=self.cache_ttl_s)
            except Exception as exc:
                log.debug("token cache write failed: %s", exc)
        return Count(exact, exact=True)

    async def _ask(self, model: str, system: str | None, messages: list[Message],
                   *, tools: list[ToolSpec]) -> int | None:
        assert self.exact is not None  # reachable
        self.calls += 1
        try:
            answer = await self.exact(CountTokens(model=model, system=system, messages=messages, tools=tools))
        except Exception as exc:  # no llm service answered in time: not reachable now
            self._down_until = time.monotonic() + UNREACHABLE_PAUSE_S
            log.info("count_tokens unreachable (%s); using the estimate for %.0fs", type(exc).__name__,
                     UNREACHABLE_PAUSE_S)
            return None
        if answer.input_tokens is not None:
            return answer.input_tokens
        if answer.status is not None:
            # 400: this request (e.g. an unknown model id) is not countable; anything else
            # (404 on a proxy without the endpoint, 429, 5xx) says: stop asking for a while.
            if answer.status != 400:
                self._down_until = time.monotonic() + UNREACHABLE_PAUSE_S
            log.info("count_tokens answered %s; using the estimate", answer.status)
        else:  # not configured, or the endpoint did not answer the llm service
            self._down_until = time.monotonic() + UNREACHABLE_PAUSE_S
            log.info("count_tokens unavailable (%s); using the estimate for %.0fs", answer.error,
                     UNREACHABLE_PAUSE_S)
        return None


def build_token_counter(settings: MemorySettings, exact: ExactCount | None, redis: Any = None) -> TokenCounter:
    """The counter the memory service uses, from settings (`memory_token_counting`:
    `estimate` never asks `exact`)."""
    return TokenCounter(exact=None if settings.memory_token_counting == "estimate" else exact,
                        estimator=Estimator(chars_per_token=settings.memory_chars_per_token),
                        redis=redis, cache_size=settings.memory_token_cache_size,
                        cache_ttl_s=settings.memory_token_cache_ttl_s)
