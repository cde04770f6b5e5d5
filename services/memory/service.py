"""The memory service's shell: read the history and the session's memory, fit the
context under the window, hand the request to the llm service, ack; then let the
observer look at the turns in the background.

    decode AssembleContext
      -> read: compaction record + observations (one round trip), history from the
         record's boundary on (the summarised part is never read again), tool catalog
      -> ContextGuard.fit: measure, maybe compact (summary through the llm service)
      -> effects: store the new compaction (with its cost), emit `compaction`, claim the
         tokens spent for this step (`extra_usage`), publish `Generate`
      -> ack -> Observer.poke (observations/reflections, off the critical path)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import orjson
from faststream.nats import NatsBroker, NatsMessage
from pydantic import ValidationError

from loopwire.shared import metrics
from loopwire.shared.envelopes import AssembleContext, ToolSpec
from loopwire.shared.inflight import keep_alive
from loopwire.shared.runtime import ServiceContext

from . import compaction as c
from .assembly import build_generate, offered_tools, system_prompt, with_sections
from .context_guard import Context, ContextGuard, GuardConfig, GuardOutcome
from .observations import Observer, memory_section
from .store import MemoryStore, Snapshot
from .summarizer import LlmSummarizer
from .tokens import TokenCounter, build_token_counter

log = logging.getLogger("loopwire.memory")

MEMORY_SECTION_SHARE = 0.1
"""The hydrated memory takes at most this share of the window."""


class MemoryService:
    name = "memory"

    def __init__(self, ctx: ServiceContext, counter: TokenCounter | None = None) -> None:
        self.ctx = ctx
        s = ctx.settings
        self.counter = counter or build_token_counter(s, redis=ctx.redis)
        self.store = MemoryStore(ctx.redis, ttl_s=s.session_ttl_s, claim_ttl_s=s.step_result_ttl_s)
        self._summarizer: LlmSummarizer | None = None
        self._observer: Observer | None = None

    def register(self, broker: NatsBroker) -> None:
        self.ctx.work_subscriber(self.ctx.subjects.memory_assemble, "memory")(self.on_assemble)

    async def start(self) -> None:
        s = self.ctx.settings
        self._summarizer = LlmSummarizer(self.ctx.bus.nc, self.ctx.subjects.llm_summarize,
                                         s.memory_summary_timeout_s)
        self._observer = Observer(self.store, self.ctx.sessions, self._summarizer.complete, self.ctx.bus.emit,
                                  every_turns=s.memory_observe_every_turns,
                                  reflect_every=s.memory_reflect_every_observations)

    async def stop(self) -> None:
        if self._observer is not None:
            await self._observer.stop()
        await self.counter.aclose()

    @property
    def observer(self) -> Observer:
        assert self._observer is not None, "start() first"
        return self._observer

    # -- the handler -------------------------------------------------------------------------
    async def on_assemble(self, msg: NatsMessage) -> None:
        try:
            env = AssembleContext.model_validate(orjson.loads(msg.body))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            log.error("malformed assemble envelope dropped: %s", exc)
            await msg.reject()  # a body that can never decode is not redelivered
            return
        beat = asyncio.create_task(keep_alive(msg.in_progress, self.ctx.settings.ack_wait_s))
        try:
            await self.assemble(env)
        except Exception:
            log.exception("session %s: assembling %s failed; it will be redelivered", env.session_id, env.step_id)
            await msg.nack(delay=1.0)
            return
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        await msg.ack()
        self.observer.poke(env)

    async def assemble(self, env: AssembleContext) -> GuardOutcome:
        s = self.ctx.settings
        assert self._summarizer is not None, "start() first"
        cfg = GuardConfig.of(s, env)
        snap = await self.store.snapshot(env.session_id, env.actor, s.memory_observations_in_context,
                                         s.memory_reflections_in_context)
        context = await self._context(env, snap)
        tools = offered_tools(env, await self._catalog()) if env.offer_tools else []
        section = memory_section(snap, int(cfg.window * MEMORY_SECTION_SHARE * s.memory_chars_per_token))
        context.system = system_prompt(with_sections(env.system, [section] if section else []), env.ephemeral_notes)
        context.tools = tools

        guard = ContextGuard(self.counter, self._summarizer.for_step(env))
        outcome = await guard.fit(context, cfg, env.step_id)

        if outcome.record is not None:
            await self.store.save_compaction(env.session_id, outcome.record)
        elif outcome.usage.total_input() or outcome.usage.output_tokens:
            await self.store.add_usage(env.session_id, outcome.usage)  # a failed summary still cost
        event = outcome.event
        if event is None and context.record is not None and context.record.step_id == env.step_id:
            # A redelivery of the step that compacted: its event again (deduplicated by key).
            event = {"tokens_before": context.record.tokens_before, "tokens_after": context.record.tokens_after,
                     "method": "summary", "messages_compacted": context.record.covers - 1}
        if event is not None:
            await self.ctx.bus.emit(env.session_id, env.run_id, "compaction", key=f"{env.step_id}:compaction",
                                    **event)
        if outcome.event is not None:  # counted once, not again for a redelivered step
            metrics.COMPACTIONS.inc()
        extra = await self.store.claim_usage(env.session_id, env.step_id)
        notes = [outcome.note] if outcome.note else []
        request = build_generate(env, outcome.messages, tools, system_prompt(context.system, notes), extra)
        await self.ctx.bus.publish_work(self.ctx.subjects.llm_generate, request, msg_id=f"{env.step_id}:generate")
        return outcome

    async def _context(self, env: AssembleContext, snap: Snapshot) -> Context:
        """The history this generation sees: from the compaction's boundary on when the
        stored compaction still matches the history, else all of it."""
        sessions, sid, n = self.ctx.sessions, env.session_id, env.history_len
        model = env.models[0] if env.models else self.ctx.settings.default_model
        if n <= 0:
            return Context(model=model, system=None, tools=[], head=None, rest=[], start=1)
        record = snap.record
        if record is not None and 2 <= record.covers < n:
            head = await sessions.history(sid, 0, 0)
            part = await sessions.history(sid, record.covers - 1, n - 1)
            if head and part and c.fingerprint(head[0], part[0], record.covers) == record.fingerprint:
                return Context(model=model, system=None, tools=[], head=head[0], rest=part[1:],
                               start=record.covers, record=record)
            log.info("session %s: stored compaction does not match the history; starting over", sid)
        full = await sessions.history(sid, 0, n - 1)
        return Context(model=model, system=None, tools=[], head=full[0] if full else None, rest=full[1:], start=1)

    async def _catalog(self) -> dict[str, ToolSpec]:
        from loopwire.tools.catalog import read_catalog

        s = self.ctx.settings
        return await read_catalog(self.ctx.redis, max_age_s=s.discovery_interval_s * s.discovery_misses * 2)
