"""The llm service: `Generate` envelopes in, `GenerationResult` envelopes out.

The handler is a thin shell::

    decode -> claim the step (shared/stores/step_store.py): recorded already? republish the
              record, ack (no model call); claimed by another live worker? retried later
           -> claimed before (its fencing token > 1)? emit `retracted` (a partial answer
              an earlier attempt streamed is void)
           -> run the fallback chain (step_chain.py), turning its events (model_events.py)
              into `text.delta`, `generating`, `model.fallback` and `retracted` events,
              heartbeats (in_progress) while it runs
           -> record `gen:<step_id>` under the claim (lost it: publish nothing) -> to the router
              (shared/runtime/dispatcher.py: a call when it runs in this process, a request to
              the replica that sent the step, else a work message) -> return
              (the handler runner acks; an exception is judged by the one redelivery
              policy, shared/runtime/redelivery.py)

Record before publish, ack after publish: a crash anywhere replays safely (the record
answers the replay; the result's Nats-Msg-Id deduplicates a second publish).

In the executor profiles (claude_code, ...: `Generate.executor` set) an external coding
agent answers instead of the fallback chain (executors/runner.py), inside the same claim,
record, heartbeat and cancel handling.

A model under LOOPWIRE_MODEL_LIMITS has each request admitted by the fleet-wide budget
first (limiter.py): over a limit it waits, with a `model.throttled` event before its
`generating`.

Each request asks the fleet-wide circuit breaker (breaker.py, state in Redis) which of its
models to skip: an open breaker moves the request to the next fallback at once, with a
`model.fallback` event whose reason is `circuit_open`.

It also listens on `<prefix>.ctl.<sid>.cancel` (core NATS, best effort; body optional,
`{"run_id": ...}` narrows it to one run), as the tools service does: a steer or an abort
stops the session's in-flight generations at once (no more tokens paid for), retracts
their streamed text and answers a `cancelled` error result, which is not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from faststream.nats import NatsBroker
from pydantic import ValidationError

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import CountTokens, Generate, GenerationResult, TokenCount
from loopwire.shared.contract.event_fields import RetractedFields
from loopwire.shared.runtime.chain import Delivery, current_delivery, decode
from loopwire.shared.runtime.inflight import Heartbeat, InflightSteps, StepCancelled, unless_cancelled
from loopwire.shared.runtime.redelivery import Undeliverable
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.blobs import resolve_messages
from loopwire.shared.stores.step_store import renewed

from .breaker import CircuitBreaker, breaker_from_settings
from .errors import ModelCallError
from .executors.runner import ExecutorSteps
from .generation import model_chain, model_request, record_key, result_failed, result_ok
from .limiter import limiter_from_settings
from .model import Model
from .providers import build_model_factory
from .retrying import RetryPolicy, Sleep
from .settings import LlmSettings
from .step_chain import step_model
from .step_events import StepEvents
from .step_metrics import count_step
from .summarize import SummarizeResponder
from .token_count import AnthropicTokenCount, TokenCountResponder, token_count_from_settings

log = logging.getLogger("loopwire.llm")

REDELIVERED_REASON = "redelivered: the partial answer is void"
CANCELLED_REASON = "cancelled: the partial answer is void"


class LlmService:
    name = "llm"

    def __init__(self, ctx: ServiceContext[LlmSettings], model_factory: Callable[[str], Model] | None = None,
                 breaker: CircuitBreaker | None = None, *, sleep: Sleep = asyncio.sleep,
                 token_count: AnthropicTokenCount | None = None) -> None:
        self.ctx = ctx
        self._owns_factory = model_factory is None
        self.model_factory: Callable[[str], Model] = model_factory or build_model_factory(ctx.settings)
        self.breaker = breaker if breaker is not None else breaker_from_settings(ctx.settings, ctx.redis,
                                                                                      replication=ctx.replication)
        self._sleep = sleep
        s = ctx.settings
        self.policy = RetryPolicy(max_retries=s.llm_max_retries, base_delay_s=s.llm_retry_base_delay_s,
                                  max_delay_s=s.llm_retry_max_delay_s)
        self.limiter = limiter_from_settings(ctx)
        """The model limits' side of this replica (None: LOOPWIRE_MODEL_LIMITS unset)."""
        self._inflight = InflightSteps(ctx.subjects)
        """session id -> (run id, cancel event) of each generation running here."""
        self._cancel_sub: Any = None
        self.summarizer = SummarizeResponder(ctx, self.model_factory, self.policy, breaker=self.breaker, sleep=sleep,
                                             limiter=self.limiter)
        """Answers the memory service's summaries on `<prefix>.rpc.llm.summarize` (summarize.py)."""
        self._owns_token_count = token_count is None
        self.token_count = token_count or token_count_from_settings(ctx.settings)
        self.token_counts = TokenCountResponder(
            self.token_count, ctx.subjects.llm_count_tokens,
            queue=f"{ctx.settings.subject_prefix.replace('.', '_')}_llm_count_tokens")
        """Answers the memory service's exact counts on `<prefix>.rpc.llm.count_tokens` (token_count.py)."""
        self.executors = ExecutorSteps(ctx)
        """The external agents of the executor profiles (executors/runner.py)."""

    # -- wiring ------------------------------------------------------------------------------
    def register(self, broker: NatsBroker) -> None:
        subscriber = self.ctx.work_subscriber(self.ctx.subjects.llm_generate, "llm",
                                              max_workers=self.ctx.settings.llm_max_handlers)
        subscriber(self.handle)
        # In this process, memory's generations, counts and summaries are calls (dispatcher.py).
        dispatch = self.ctx.dispatch
        dispatch.serve((Generate,), self._take)
        dispatch.answer("count_tokens", self.count_tokens)
        dispatch.answer("summarize", self.summarize)

    async def _take(self, env: Generate, recover: bool) -> None:
        await self.process(env)

    async def start(self) -> None:
        self._cancel_sub = await self.ctx.bus.nc.subscribe(self.ctx.subjects.cancel_all, cb=self._inflight.on_notice)
        if self.limiter is not None:
            await self.limiter.start_with(self.ctx.bus.nc)
        await self.summarizer.start(self.ctx.bus.nc)
        await self.token_counts.start(self.ctx.bus.nc)
        await self.executors.start()

    async def stop(self) -> None:
        if self.limiter is not None:
            await self.limiter.stop()
        await self.summarizer.stop()
        await self.token_counts.stop()
        if self._owns_token_count:
            await self.token_count.aclose()
        await self.executors.stop()
        if self._cancel_sub is not None:
            with contextlib.suppress(Exception):
                await self._cancel_sub.unsubscribe()
            self._cancel_sub = None
        aclose = getattr(self.model_factory, "aclose", None)
        if self._owns_factory and aclose is not None:
            await aclose()

    async def count_tokens(self, request: CountTokens) -> TokenCount:
        """The exact count of a request, for the memory service in this process (token_count.py)."""
        return await self.token_count.count(request)

    async def summarize(self, env: Generate) -> GenerationResult:
        """A summary or an observation for the memory service in this process (summarize.py)."""
        return await self.summarizer.reply(env)

    # -- the handler ---------------------------------------------------------------------------
    async def handle(self, msg: Delivery) -> None:
        """Settled by the handler runner (shared/runtime/chain.py): returns when the result is on
        its way to the router; raises (redelivered, or given up) when it is not."""
        try:
            env = decode(msg, Generate)
        except ValidationError as exc:
            raise Undeliverable(f"a malformed llm.generate envelope: {exc}") from None
        await self.process(env)

    async def process(self, env: Generate,
                      heartbeat: Callable[[], Awaitable[None]] | None = None) -> GenerationResult:
        """Answer one step: from its record when it has one, else from the model."""
        ctx = self.ctx
        key = record_key(env)
        # Every delivery, first or not, claims the step before the model is called: one
        # in a paused process's buffer may be work another replica did meanwhile
        # (shared/stores/step_store.py). Raises StepHeld while another live worker has it.
        ttl_s = ctx.settings.ack_wait_s
        claim = await ctx.steps.claim(key, [key], ttl_s)
        if claim.token is None:  # recorded: answered from the record, no model call
            count_step("replayed")
            return await self._publish_recorded(env, claim.records[0] or {})
        attempt = claim.attempt
        if attempt > 1:
            # The step was claimed before and never recorded: that attempt (a crashed or
            # paused worker's) may have streamed part of an answer, which is void.
            await ctx.bus.emit(env.session_id, env.run_id, "retracted", key=message_ids.retract_key(env.step_id, attempt),
                               fields=RetractedFields(turn=env.turn, reason=REDELIVERED_REASON))
        # The delivery's runner keeps it alive meanwhile (shared/runtime/chain.py); `heartbeat` is
        # for a caller outside a delivery.
        # The step's events go out behind the model (step_events.py); its result goes to the
        # router only after them.
        shown = StepEvents(ctx.bus, env, attempt)
        try:
            with Heartbeat(None if current_delivery() is not None else heartbeat, ctx.settings.ack_wait_s):
                async with renewed(ctx.steps, key, claim.token, ttl_s=ttl_s):
                    result = await self._generate(env, attempt, shown)
        except asyncio.CancelledError:
            # A drain that ran out of time (shared/runtime/work_consumer.py): the step goes
            # back to the stream, and the replica that takes it should not wait out the claim.
            with contextlib.suppress(Exception):
                await asyncio.shield(ctx.steps.release(key, claim.token))
            raise
        if result.error is not None and result.error.code == "cancelled":
            # Not recorded: the step is stale for the router, and nothing was decided.
            await ctx.steps.release(key, claim.token)
            await shown.sent()
            await ctx.dispatch.send(result, msg_id=message_ids.result_msg_id(env.step_id), replica=env.result_to)
            count_step("cancelled")
            return result
        if shown.unsent_kept:
            # A record stands for the whole step, and its replay emits no event again: an
            # event the transcript keeps (a fallback, a retraction) is out before it.
            await shown.sent()
        # Written under this worker's claim only: one that lost it (paused past AckWait
        # while another replica took the step) raises StepHeld and publishes nothing. A
        # delivery that finished first stays the one on record. The step's ephemeral events
        # (`generating`, `text.delta`) are stored meanwhile.
        mine = result.model_dump(mode="json")
        standing = await ctx.steps.record_claimed(key, claim.token, key, value=mine, release=True)
        await shown.sent()
        if standing != mine:
            return await self._publish_recorded(env, standing)
        await ctx.dispatch.send(result, msg_id=message_ids.result_msg_id(env.step_id), replica=env.result_to)
        count_step("ok" if result.ok else "error")
        return result

    async def _publish_recorded(self, env: Generate, recorded: dict[str, Any]) -> GenerationResult:
        result = GenerationResult.model_validate(recorded)
        await self.ctx.dispatch.send(result, msg_id=message_ids.result_msg_id(env.step_id), replica=env.result_to)
        return result

    # -- the model call ----------------------------------------------------------------------
    async def _generate(self, env: Generate, attempt: int, shown: StepEvents) -> GenerationResult:
        # Large tool results travel by reference; the model gets them whole. (The memory
        # service says when its tally of these messages found none.)
        if not env.no_refs:
            env.messages = await resolve_messages(env.messages, self.ctx.blobs)
        sid, run_id = env.session_id, env.run_id
        if env.executor is not None:  # an external agent answers (executors/runner.py)
            with self._inflight.track(sid, run_id) as cancel:
                return await self.executors.generate(env, attempt, cancel)
        default_model = self.ctx.settings.default_model
        chain = model_chain(env, default_model)
        # A cancel notice (steer, abort) stops the model's stream: no more tokens are generated.
        async with self.breaker.guarding(chain) as gate:
            # Each model of the chain traced, retried and behind the fleet-wide breaker (step_chain.py).
            runner = step_model(env, chain, self.model_factory, gate=gate, policy=self.policy, sleep=self._sleep,
                                limiter=self.limiter)
            with self._inflight.track(sid, run_id) as cancel:
                try:
                    outcome = await unless_cancelled(
                        shown.follow(runner.stream(model_request(env, default_model))), cancel)
                except StepCancelled:
                    if shown.streamed:
                        shown.emit("retracted", key=message_ids.retract_key(env.step_id, "cancel"),
                                   fields=RetractedFields(turn=env.turn, reason=CANCELLED_REASON))
                    log.info("llm step %s cancelled", env.step_id)
                    return result_failed(env, ModelCallError("cancelled",
                                                             "the generation was cancelled (steer or abort)"))
                except ModelCallError as err:
                    log.warning("llm step %s failed: %r %s", env.step_id, err, err.message)
                    return result_failed(env, err)
        return result_ok(env, outcome)
