"""The memory service's shell: read the history and the session's memory, fit the
context under the window, hand the request to the llm service, ack; then let the
observer look at the turns in the background.

    decode AssembleContext
      -> read: compaction record + observations (one round trip), history from the
         record's boundary on (the summarised part is never read again), tool catalog
      -> ContextGuard.fit: measure, maybe compact (summary through the llm service)
      -> effects: store the new compaction (with its cost), emit `compaction`, claim the
         tokens spent for this step (`extra_usage`), publish `Generate` (in `loopwire up`:
         hand it to the llm service in-process, docs/architecture.md)
      -> return (the handler runner acks) -> Observer.poke (observations/reflections,
         off the critical path)
"""

from __future__ import annotations

import logging
from functools import partial

from faststream.nats import NatsBroker
from pydantic import ValidationError

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import AssembleContext, ToolSpec
from loopwire.shared.contract.event_fields import CompactionFields
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.chain import Delivery, decode
from loopwire.shared.runtime.lru import LruCache
from loopwire.shared.runtime.redelivery import Undeliverable
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.tool_catalog import CatalogCache

from . import compaction
from .assembly import build_generate, offered_tools, system_prompt, with_sections
from .context_guard import Context, ContextGuard, GuardConfig, GuardOutcome
from .exact_count import LlmExactCount
from .history_memo import HistoryMemo
from .observations import Observer, Read, memory_section
from .settings import MemorySettings
from .store import MemoryStore, Snapshot
from .summarizer import LlmSummarizer
from .tokens import TokenCounter, build_token_counter

log = logging.getLogger("loopwire.memory")

MEMORY_SECTION_SHARE = 0.1
"""The hydrated memory takes at most this share of the window."""
SEEN_SESSIONS = 10_000
"""Sessions whose compaction boundary the service remembers (to read their history in
the same round trip as their memory)."""


class MemoryService:
    name = "memory"

    def __init__(self, ctx: ServiceContext[MemorySettings], counter: TokenCounter | None = None) -> None:
        self.ctx = ctx
        s = ctx.settings
        self.counter = counter or build_token_counter(s, LlmExactCount(ctx), redis=ctx.redis)
        self.store = MemoryStore(ctx.redis, ttl_s=s.session_ttl_s, claim_ttl_s=s.step_result_ttl_s,
                                 channel=ctx.replication.channel if ctx.replication is not None else None)
        self._summarizer: LlmSummarizer | None = None
        self._observer: Observer | None = None
        self._catalog_cache: CatalogCache | None = None
        self._covers: LruCache[str, int] = LruCache(SEEN_SESSIONS)
        """Per session, the compaction boundary (`covers`, 0 for none) its last assembly
        used: the history ranges to read along with the memory. A wrong guess costs a
        second read, never a wrong context."""
        self.history = HistoryMemo(self.counter.estimator, s.memory_history_memo_bytes)

    def register(self, broker: NatsBroker) -> None:
        self.ctx.work_subscriber(self.ctx.subjects.memory_assemble, "memory",
                                 max_workers=self.ctx.settings.memory_max_handlers)(self.on_assemble)

    async def start(self) -> None:
        s = self.ctx.settings
        self._summarizer = LlmSummarizer(partial(self.ctx.dispatch.ask, "summarize"), s.memory_summary_timeout_s)
        self._observer = Observer(self.store, self.ctx.sessions, self._summarizer.complete, emit=self.ctx.bus.emit,
                                  every_turns=s.memory_observe_every_turns,
                                  reflect_every=s.memory_reflect_every_observations)

    async def stop(self) -> None:
        if self._observer is not None:
            await self._observer.stop()

    @property
    def observer(self) -> Observer:
        assert self._observer is not None, "start() first"
        return self._observer

    # -- the handler -------------------------------------------------------------------------
    async def on_assemble(self, msg: Delivery) -> None:
        """Settled by the handler runner (shared/runtime/chain.py), which also keeps the message
        alive while the generation runs here (in `loopwire up`)."""
        try:
            env = decode(msg, AssembleContext)
        except ValidationError as exc:
            raise Undeliverable(f"a malformed assemble envelope: {exc}") from None
        read: list[Read] = []
        await self.assemble(env, read=read)
        self.observer.poke(env, read[0] if read else None)

    async def assemble(self, env: AssembleContext, *, read: list[Read] | None = None) -> GuardOutcome:
        """Assemble the step's context and hand the generation on: to the llm service in
        this process, else as a `llm.generate` work message. `read` gets the part of the
        history read for it (the observer counts its model turns without a second read)."""
        s = self.ctx.settings
        assert self._summarizer is not None, "start() first"
        cfg = GuardConfig.of(s, env)
        ranges = self._history_ranges(env)
        # The tokens memory spent since the last generation (observations, reflections)
        # are claimed for this step in the same round trip as the reads.
        snap = await self.store.snapshot(env.session_id, env.actor, s.memory_observations_in_context,
                                         reflections=s.memory_reflections_in_context, history=ranges, claim_for=env.step_id,
                                         history_reader=self.ctx.sessions.pipelined_history(env.session_id) if ranges else None,
                                         decode=self.history.decode)
        context = await self._context(env, snap, ranges)
        if read is not None:
            read.append((context.start, list(context.rest)))
        tools = offered_tools(env, await self._catalog(env.tools)) if env.offer_tools else []
        section = memory_section(snap, int(cfg.window * MEMORY_SECTION_SHARE * s.memory_chars_per_token))
        stable = with_sections(env.system, [section] if section else [])
        context.system = system_prompt(stable, env.ephemeral_notes)
        context.tools = tools

        if env.executor is not None:
            # An external agent keeps and compacts its own context (the llm service asks it
            # to): the history goes as it is, unmeasured.
            outcome = GuardOutcome(compaction.assemble(context.head, None, context.start, tail=context.rest,
                                                       memo=self.history), 0, False)
        else:
            guard = ContextGuard(self.counter, self._summarizer.for_step(env))
            outcome = await guard.fit(context, cfg, env.step_id)
        boundary = outcome.record or context.record
        self._covers.put(env.session_id, boundary.covers if boundary is not None else 0)

        if outcome.record is not None:
            await self.store.save_compaction(env.session_id, outcome.record)
        elif outcome.usage.total_input() or outcome.usage.output_tokens:
            await self.store.add_usage(env.session_id, outcome.usage)  # a failed summary still cost
        event = outcome.event
        if event is None and context.record is not None and context.record.step_id == env.step_id:
            # A redelivery of the step that compacted: its event again (deduplicated by key).
            event = CompactionFields(tokens_before=context.record.tokens_before,
                                     tokens_after=context.record.tokens_after, method="summary",
                                     messages_compacted=context.record.covers - 1)
        if event is not None:
            await self.ctx.bus.emit(env.session_id, env.run_id, "compaction", key=message_ids.compaction_key(env.step_id),
                                    fields=event)
        if outcome.event is not None:  # counted once, not again for a redelivered step
            metrics.COMPACTIONS.inc()
        extra = snap.claimed
        if outcome.record is not None or outcome.usage.total_input() or outcome.usage.output_tokens or (
                context.record is not None and context.record.step_id == env.step_id):
            # This step's own compaction cost (also on a redelivery: the claim is per key).
            compacting = await self.store.claim_usage(env.session_id, message_ids.compaction_key(env.step_id))
            if compacting is not None:
                extra = compacting if extra is None else extra + compacting
        notes = [outcome.note] if outcome.note else []
        # With the prompt cache, what memory remembers rides after the last breakpoint, with
        # the step's notes: an observation made mid-run would otherwise change the system
        # prompt, and with it the cached prefix of the whole conversation behind it.
        remembered = [section] if section and env.prompt_cache == "auto" else []
        request = build_generate(env, outcome.messages, tools, system=system_prompt(context.system, notes), extra_usage=extra,
                                 no_refs=outcome.no_refs, stable_system=env.system if remembered else stable,
                                 notes=[*remembered, *env.ephemeral_notes, *notes],
                                 input_tokens=outcome.tokens)
        msg_id = message_ids.generate_msg_id(env.step_id)
        # With the llm service in this process the generation runs here, while this step's
        # message stays unacked (kept alive by its handler runner); a crash redelivers it and
        # the llm answers from its record if it got that far. One that fails here goes on as
        # its own `llm.generate` message, with its own delivery budget, exactly as between
        # separate processes (shared/runtime/dispatcher.py).
        await self.ctx.dispatch.send(request, msg_id=msg_id)
        return outcome

    def _history_ranges(self, env: AssembleContext) -> list[tuple[int, int]]:
        """The history ranges the assembly will likely read, to read them with the memory:
        the head and the part after the boundary of the session's last compaction, else all."""
        n = env.history_len
        if n <= 0 or not self.ctx.sessions.supports(Capability.PIPELINED_HISTORY):
            return []
        covers = self._covers.get(env.session_id)
        if covers and 2 <= covers < n:
            return [(0, 0), (covers - 1, n - 1)]
        return [(0, n - 1)]

    async def _context(self, env: AssembleContext, snap: Snapshot,
                       ranges: list[tuple[int, int]] | None = None) -> Context:
        """The history this generation sees: from the compaction's boundary on when the
        stored compaction still matches the history, else all of it. `ranges` were read
        with `snap` (snap.history); what they do not cover is read now."""
        sessions, sid, n = self.ctx.sessions, env.session_id, env.history_len
        model = env.models[0] if env.models else self.ctx.settings.default_model
        if n <= 0:
            return Context(model=model, system=None, tools=[], head=None, rest=[], start=1)
        ranges = ranges or []
        read_full = snap.history[0] if ranges == [(0, n - 1)] else None
        record = snap.record
        if record is not None and 2 <= record.covers < n:
            if ranges == [(0, 0), (record.covers - 1, n - 1)]:
                head, part = snap.history
            elif read_full is not None:
                head, part = read_full[:1], read_full[record.covers - 1:]
            else:
                head = await sessions.history(sid, 0, 0)
                part = await sessions.history(sid, record.covers - 1, n - 1)
            if head and part and compaction.fingerprint(head[0], part[0], record.covers) == record.fingerprint:
                return Context(model=model, system=None, tools=[], head=head[0], rest=part[1:],
                               start=record.covers, record=record, memo=self.history)
            log.info("session %s: stored compaction does not match the history; starting over", sid)
        full = read_full if read_full is not None else await sessions.history(sid, 0, n - 1)
        return Context(model=model, system=None, tools=[], head=full[0] if full else None, rest=full[1:], start=1,
                       memo=self.history)

    async def _catalog(self, names: list[str] | None) -> dict[str, ToolSpec]:
        if self._catalog_cache is None:
            self._catalog_cache = CatalogCache(self.ctx.redis, self.ctx.settings)
        return await self._catalog_cache.get(names)
