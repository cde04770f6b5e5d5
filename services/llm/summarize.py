"""Internal, non-streamed generations for the memory service (summaries, observations).

A core request/reply on `<prefix>.rpc.llm.summarize` (one queue group across replicas):
a `Generate` in, a `GenerationResult` back. The same fallback chain, retries, breaker
and traces as a run's generation; no `text.delta` events (the user never sees these
tokens stream), and the reply goes back to the caller instead of the router. A
successful answer is recorded under the request's step id before the reply, so a
repeated request (the memory step redelivered after a crash) is answered from the record.

Each request runs in its own task (responder.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from nats.aio.msg import Msg
from pydantic import ValidationError

from loopwire.shared.contract import codec
from loopwire.shared.contract.envelopes import Generate, GenerationResult
from loopwire.shared.runtime.service_context import ServiceContext

from .breaker import CircuitBreaker
from .errors import ModelCallError
from .generation import model_chain, model_request, record_key, result_failed, result_ok
from .limiter import ModelLimiter
from .model import Model
from .model_events import finished
from .responder import CoreResponder
from .retrying import RetryPolicy, Sleep
from .settings import LlmSettings
from .step_chain import step_model
from .step_metrics import count_step

log = logging.getLogger("loopwire.llm.summarize")


class SummarizeResponder(CoreResponder):
    def __init__(self, ctx: ServiceContext[LlmSettings], model_factory: Callable[[str], Model], policy: RetryPolicy,
                 *, breaker: CircuitBreaker | None, sleep: Sleep, limiter: ModelLimiter | None = None) -> None:
        super().__init__(ctx.subjects.llm_summarize, f"{ctx.settings.subject_prefix.replace('.', '_')}_llm_summarize")
        self.ctx = ctx
        self.model_factory = model_factory
        self.policy = policy
        self.breaker = breaker if breaker is not None else CircuitBreaker.disabled()
        self._sleep = sleep
        self._limiter = limiter
        """The model limits count the summaries too: they are requests to the same models."""

    async def _reply(self, msg: Msg) -> None:
        try:
            env = Generate.model_validate(codec.loads(msg.data))
        except (ValidationError, ValueError) as exc:
            log.error("malformed summarize request dropped: %s", exc)
            return  # the caller times out and falls back
        result = await self.reply(env)
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(codec.dumps(result))

    async def reply(self, env: Generate) -> GenerationResult:
        """The answer to one request, a failure to answer as a failed result (what the
        request's caller and a caller in this process both get)."""
        try:
            return await self.answer(env)
        except Exception as exc:  # Redis down, say: the caller falls back
            log.exception("summarize %s failed", env.step_id)
            return result_failed(env, ModelCallError("internal", f"summarize failed: {exc}", False, model=None))

    async def answer(self, env: Generate) -> GenerationResult:
        recorded = await self.ctx.steps.get(record_key(env))
        if recorded is not None:
            count_step("replayed")
            return GenerationResult.model_validate(recorded)
        default_model = self.ctx.settings.default_model
        chain = model_chain(env, default_model)
        # The same fleet-wide breaker as the run's generations: a model that is failing
        # is not asked for summaries either.
        async with self.breaker.guarding(chain) as gate:
            runner = step_model(env, chain, self.model_factory, gate=gate, policy=self.policy, sleep=self._sleep,
                                limiter=self._limiter)
            try:
                outcome = await finished(runner.stream(model_request(env, default_model)))
            except ModelCallError as err:
                log.warning("summarize %s failed: %r %s", env.step_id, err, err.message)
                count_step("error")
                return result_failed(env, err)  # not recorded: a later request may succeed
        result = result_ok(env, outcome)
        standing = await self.ctx.steps.put_if_absent(record_key(env), result.model_dump(mode="json"))
        count_step("ok")
        return GenerationResult.model_validate(standing)
