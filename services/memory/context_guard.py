"""The context guard: before each generation, the request against the context window.

    measure (estimate; count_tokens when the estimate is anywhere near a threshold)
      -> under `compaction_at_pct`: send as is (with a pressure note above `pressure_pct`)
      -> at or over it (or `reduce_context` after a context_too_long error): compact
           choose the span (compaction.choose_boundary), summarise it incrementally
           through the llm service -> a new CompactionRecord the session reuses
           summary failed -> preflight compression: drop the span instead (this request
           only; the history is never touched)
      -> still over: drop further oldest (tool-pair-safe) turns, keeping the latest one

The guard does no I/O of its own: it is given a `TokenCounter` and a `Summarize`
callable (the memory service binds it to the llm service's summarize subject).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loopwire.shared.contract.envelopes import AssembleContext, ToolSpec, Usage
from loopwire.shared.contract.event_fields import CompactionFields
from loopwire.shared.contract.messages import Message

from .compaction import (
    SUMMARY_SYSTEM,
    CompactionRecord,
    assemble,
    boundary_candidates,
    choose_boundary,
    chunk_span,
    fingerprint,
    summary_request,
)
from .settings import MemorySettings
from .tokens import Count, TokenCounter

if TYPE_CHECKING:
    from .history_memo import HistoryMemo

log = logging.getLogger("loopwire.memory.guard")

EXACT_MARGIN = 0.25
"""Below (threshold x (1 - margin)) by estimate, no exact count is needed: once calibrated,
the estimate's error is well inside this margin (tests/unit/memory/test_tokens.py)."""
CALIBRATION_SAMPLES = 3
"""Until the estimator has seen this many exact counts, every request is counted exactly."""
PRESSURE_NOTE = ("Context is at {pct}% capacity — prefer concise responses and avoid requesting "
                 "large tool outputs.")


class SummaryFailed(Exception):
    """The llm service could not produce a summary (no responder, timeout, model error)."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()
        """Tokens spent before the failure (an earlier chunk's summary): still counted."""


Summarize = Callable[[str, str, list[Message], int], Awaitable[tuple[str, Usage]]]
"""(step suffix, system, messages, max_tokens) -> (text, usage); raises SummaryFailed."""


@dataclass(frozen=True)
class GuardConfig:
    window: int
    compaction_at_pct: float = 0.8
    pressure_pct: float = 0.7
    target_pct: float = 0.6
    reduce_pct: float = 0.5
    keep_turns: int = 2
    summary_max_tokens: int = 1024
    reduce: bool = False

    @classmethod
    def of(cls, settings: MemorySettings, env: AssembleContext) -> GuardConfig:
        window = env.context_window
        if settings.context_window_cap > 0:
            window = min(window, settings.context_window_cap)
        return cls(window=max(1, window), compaction_at_pct=env.compaction_at_pct,
                   pressure_pct=settings.memory_pressure_pct, target_pct=settings.memory_compaction_target_pct,
                   reduce_pct=settings.memory_reduce_context_pct, keep_turns=settings.memory_keep_recent_turns,
                   summary_max_tokens=settings.memory_summary_max_tokens, reduce=env.reduce_context)

    @property
    def threshold(self) -> int:
        return int(self.window * self.compaction_at_pct)

    @property
    def pressure_at(self) -> int:
        """The token count from which the pressure note is added; 0: never (a
        `pressure_pct` of 0 turns the note off rather than adding it to every request)."""
        return max(1, int(self.window * self.pressure_pct)) if self.pressure_pct > 0 else 0

    @property
    def summary_budget(self) -> int:
        return max(64, min(self.summary_max_tokens, int(self.window * 0.15)))

    @property
    def target(self) -> int:
        """Where a compaction aims: well under the threshold, or half the window after a
        context_too_long error."""
        if self.reduce:
            return int(self.window * self.reduce_pct)
        return int(self.threshold * self.target_pct)


@dataclass
class Context:
    """What one generation would send, before compaction."""

    model: str
    system: str | None
    tools: list[ToolSpec]
    head: Message | None
    """history[0], the first user request (None for an empty history)."""
    rest: list[Message]
    """history[start:], verbatim."""
    start: int
    """1 without a compaction; the record's `covers` with one."""
    record: CompactionRecord | None = None
    memo: HistoryMemo | None = None
    """Where `head` and `rest` were decoded: their normalised forms and tallies are made."""


@dataclass
class GuardOutcome:
    messages: list[Message]
    tokens: int
    exact: bool
    record: CompactionRecord | None = None
    """A new compaction to store (None: nothing new)."""
    event: CompactionFields | None = None
    """Fields of the `compaction` event, when this generation compacted."""
    usage: Usage = field(default_factory=Usage)
    """Tokens spent on summaries for this generation."""
    note: str | None = None
    """The pressure note, when the context is above the pressure threshold."""
    no_refs: bool = False
    """`messages` hold no content by reference (shared/stores/blobs.py), as their tally
    found: the llm service need not look for any (`Generate.no_refs`). False: not known."""


class ContextGuard:
    def __init__(self, counter: TokenCounter, summarize: Summarize) -> None:
        self.counter = counter
        self.summarize = summarize

    async def fit(self, ctx: Context, cfg: GuardConfig, step_id: str) -> GuardOutcome:
        record = ctx.record
        messages = assemble(ctx.head, record.summary if record else None, ctx.start, tail=ctx.rest, memo=ctx.memo)
        measured, refs = await self._measure(ctx, messages, cfg)
        if not cfg.reduce and measured.tokens < cfg.threshold:
            return self._done(GuardOutcome(messages, measured.tokens, measured.exact, no_refs=refs == 0), cfg)

        # Per-message costs, scaled so they add up to what was measured.
        raw = [self.counter.estimator.message_tokens(m) for m in ctx.rest]
        estimated = self.counter.estimate(ctx.system, messages, ctx.tools)
        scale = measured.tokens / estimated if estimated else 1.0
        tokens = [max(1, math.ceil(t * scale)) for t in raw]
        old_summary = self._text_cost(record.summary, scale) if record else 0
        fixed = max(0, measured.tokens - sum(tokens) - old_summary)
        tail_budget = max(0, cfg.target - fixed - cfg.summary_budget)
        keep = 1 if cfg.reduce else cfg.keep_turns
        j = choose_boundary(ctx.rest, tokens, tail_budget, keep_turns=keep)
        if j is None:
            log.info("step %s: %d tokens (threshold %d) but nothing may be summarised", step_id,
                     measured.tokens, cfg.threshold)
            return self._done(GuardOutcome(messages, measured.tokens, measured.exact), cfg)

        covers = ctx.start + j
        span, tail = ctx.rest[:j], ctx.rest[j:]
        usage = Usage()
        new_record: CompactionRecord | None = None
        try:
            summary, usage = await self._summarise(record.summary if record else None, span, tokens[:j], cfg=cfg)
        except SummaryFailed as exc:
            log.warning("step %s: summarising failed (%s); dropping %d old messages from this request",
                        step_id, exc, j)
            usage = exc.usage
            method = "drop"
            summary_text = record.summary if record else None
            compacted = assemble(ctx.head, summary_text, ctx.start, tail=tail, dropped=j)
        else:
            method = "summary"
            summary_text = summary
            compacted = assemble(ctx.head, summary, covers, tail=tail)
            last = span[-1] if span else None
            new_record = CompactionRecord(covers=covers, summary=summary, step_id=step_id, usage=usage,
                                            fingerprint=fingerprint(ctx.head, last, covers),
                                            tokens_before=measured.tokens)
        after = await self.counter.count(ctx.model, ctx.system, compacted, tools=ctx.tools)
        limit = cfg.target if cfg.reduce else cfg.threshold
        dropped = 0
        if after.tokens >= limit:
            kept_from = covers if method == "summary" else ctx.start
            compacted, after, dropped = await self._drop_until_fits(
                ctx, summary_text, kept_from, tail=tail, limit=limit / scale, already=0 if method == "summary" else j)
        if new_record is not None:
            new_record.tokens_after = after.tokens
        event: CompactionFields = {"tokens_before": measured.tokens, "tokens_after": after.tokens, "method": method,
                                   "messages_compacted": j + dropped}
        return self._done(GuardOutcome(compacted, after.tokens, after.exact, new_record, event, usage), cfg)

    # -- pieces ------------------------------------------------------------------------------
    async def _measure(self, ctx: Context, messages: list[Message], cfg: GuardConfig) -> tuple[Count, int]:
        """The count of the request, and the blocks by reference its tally found."""
        tally = self.counter.estimator.tally(ctx.system, messages, ctx.tools,
                                             known=ctx.memo.terms if ctx.memo is not None else None)
        estimate = self.counter.estimator.estimate_of(tally)
        near = min(cfg.threshold, cfg.pressure_at or cfg.threshold) * (1 - EXACT_MARGIN)
        calibrated = self.counter.estimator.samples >= CALIBRATION_SAMPLES
        if estimate < near and calibrated and not cfg.reduce:
            return Count(estimate, exact=False), tally.refs
        return await self.counter.count(ctx.model, ctx.system, messages, tools=ctx.tools, tally=tally), tally.refs

    def _text_cost(self, text: str, scale: float) -> int:
        return math.ceil(self.counter.estimator.text_tokens(text) * scale)

    async def _summarise(self, previous: str | None, span: list[Message], tokens: list[int],
                         *, cfg: GuardConfig) -> tuple[str, Usage]:
        """Fold the span into the previous summary, chunk by chunk when it is larger than
        one summariser request may be."""
        # One request holds the instructions, the previous summary, the chunk and the answer.
        budget = max(256, cfg.window - 2 * cfg.summary_budget - 300)
        usage = Usage()
        summary = previous
        for i, chunk in enumerate(chunk_span(span, tokens, budget)):
            request = summary_request(summary, chunk, cfg.summary_budget)
            try:
                text, spent = await self.summarize(f"compact.{i}", SUMMARY_SYSTEM, request, cfg.summary_budget)
            except SummaryFailed as exc:
                raise SummaryFailed(str(exc), usage + exc.usage) from exc
            usage = usage + spent
            if not text.strip():
                raise SummaryFailed("the summary came back empty", usage)
            summary = text
        assert summary is not None
        return summary, usage

    async def _drop_until_fits(self, ctx: Context, summary: str | None, covers: int, *, tail: list[Message],
                               limit: float, already: int) -> tuple[list[Message], Count, int]:
        """Preflight compression: drop the oldest turns of the tail (tool-pair-safe, the
        latest turn always kept) until the request fits `limit` (in estimated tokens)."""
        dropped = 0
        while True:
            candidates = boundary_candidates(tail, keep_turns=1)
            if not candidates:
                break
            j = candidates[0]
            tail = tail[j:]
            dropped += j
            messages = assemble(ctx.head, summary, covers, tail=tail, dropped=already + dropped)
            if self.counter.estimate(ctx.system, messages, ctx.tools) < limit:
                break
        messages = assemble(ctx.head, summary, covers, tail=tail, dropped=already + dropped)
        return messages, await self.counter.count(ctx.model, ctx.system, messages, tools=ctx.tools), dropped

    @staticmethod
    def _done(outcome: GuardOutcome, cfg: GuardConfig) -> GuardOutcome:
        if cfg.pressure_at and outcome.tokens >= cfg.pressure_at:
            pct = min(100, round(100 * outcome.tokens / cfg.window))
            outcome.note = PRESSURE_NOTE.format(pct=pct)
        return outcome
